"""Sphinx configuration of the book (`make book`; book/build.py stages it beside the pages).

Sphinx + MyST-NB: the notebooks' stored outputs are rendered, never re-executed; their `$…$` and
`$$…$$` go to MathJax 3, as in JupyterLab, served from _static/mathjax (no CDN).
"""
project = "txl-tutorial"
author = "txl-tutorial contributors"
copyright = "txl-tutorial contributors (MIT)"

extensions = ["myst_nb"]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

# The notebooks are shown as committed: their outputs are the tests' stored outputs.
nb_execution_mode = "off"
nb_merge_streams = True
# No widget JavaScript (it would come from a CDN): build.py turns the explorer into its figure.
nb_ipywidgets_js = {}
# Jupyter's markdown math: $inline$, $$display$$ (also inside a paragraph), \begin{align} blocks.
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_dmath_double_inline = True
myst_heading_anchors = 3

# MathJax 3 (tex-chtml, the component JupyterLab's renderer matches) from the site itself.
mathjax_path = "mathjax/tex-chtml.js"
html_static_path = ["_static"]
# code cells as wide as their lines, wrapped only past them (book.css says why)
html_css_files = ["book.css"]

html_theme = "sphinx_book_theme"
html_title = "Transformer-XL, read, run and tested"
html_copy_source = True  # the download button offers each page's source (.ipynb, .md)
html_theme_options = {
    "repository_url": "https://github.com/txl-tutorial/txl-tutorial",
    "repository_branch": "main",
    "path_to_docs": "",
    "use_repository_button": True,
    "use_download_button": True,
    # "Open in Colab" in every notebook page's header, beside the badge of its first cell
    "launch_buttons": {"colab_url": "https://colab.research.google.com", "notebook_interface": "jupyterlab"},
    "home_page_in_toc": True,
    "show_toc_level": 2,
}
