"""The book (`make book`) in a real browser: every page, as a reader's chromium shows it.

The site is built (book/build.py, into a temporary folder), served on a free local port, and
Debian's chromium (headless, through chromium-driver and selenium) visits every page. A page fails on
- a formula that MathJax did not typeset, or typeset as an error (a TeX error, an undefined macro
  in red), or a MathJax font that did not load;
- an image that did not load, or a figure squeezed below a readable width;
- a block of code (a cell's input or output, a page's code block) that scrolls sideways, or that
  wraps though its lines are short enough to fit (book/book.css: 120 characters at this window);
- a link inside the site to a page or an anchor that does not exist;
- anything loaded from another host (the site works offline);
and each notebook page must keep its folded answers folded, show its "Open in Colab" link, and
notebook 05 its explorer's figure under the line saying it is live in Jupyter. A page with each kind
of fault is checked to fail, so that a passing run means something.

Skips, with one line saying what to install, where chromium, chromedriver, selenium or the book's
packages are missing.
"""
from __future__ import annotations

import functools
import http.server
import re
import shutil
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from book_site import INSTALL as BOOK_INSTALL
from book_site import build, built_site, missing_packages, notebook_facts, site_pages
from browser import headless_chromium, skip_without_browser

skip_without_browser("book browser test")
if _missing_book := missing_packages():
    pytest.skip(f"book browser test skipped: no {', '.join(_missing_book)}; to run it: {BOOK_INSTALL}",
                allow_module_level=True)

WIDTH = 1400  # px: a laptop's browser window
READABLE = 600  # px: a figure is shown at least this wide (or at its own width, if smaller)
FITS = 120  # characters: a line of code this long fits the column unwrapped at WIDTH (book/book.css)

# Run in the page once MathJax has typeset it and the fonts have loaded (selenium's async script).
INSPECT = """
const done = arguments[arguments.length - 1], fits = arguments[0];
const ready = (window.MathJax && MathJax.startup) ? MathJax.startup.promise : Promise.resolve();
ready.then(() => document.fonts.ready).then(() => {
  const article = document.querySelector('article') || document.body;
  const math = [...article.querySelectorAll('span.math, div.math')];
  const tex = el => el.getAttribute('data-tex') || el.textContent.trim().slice(0, 80);
  const problems = [];
  for (const el of math) {
    if (!el.querySelector('mjx-container')) problems.push('formula not typeset: ' + tex(el));
  }
  for (const err of article.querySelectorAll('mjx-merror')) {
    problems.push('TeX error: ' + (err.getAttribute('data-mjx-error') || err.textContent));
  }
  for (const t of article.querySelectorAll('mjx-mtext')) {  // noundefined: an unknown macro, in red
    if (t.style.color === 'red') problems.push('undefined macro: ' + t.textContent);
  }
  for (const f of document.fonts) {
    if (f.family.startsWith('MJX') && f.status === 'error') problems.push('MathJax font failed: ' + f.family);
  }
  for (const el of article.querySelectorAll('pre, div.highlight')) {
    if (!el.getClientRects().length) continue;  // folded away (a hidden cell's source)
    const lines = el.textContent.replace(/\\n$/, '').split('\\n');
    const start = 'code: ' + lines[0].slice(0, 60);
    if (el.scrollWidth > el.clientWidth) {
      problems.push(`${start} scrolls sideways (${el.scrollWidth} px in ${el.clientWidth})`);
    }
    const style = getComputedStyle(el);
    const rows = (el.clientHeight - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom))
      / parseFloat(style.lineHeight);
    if (el.tagName === 'PRE' && Math.max(...lines.map(l => l.length)) <= fits && Math.round(rows) > lines.length) {
      problems.push(`${start} wraps though its lines fit (${Math.round(rows)} rows for ${lines.length} lines)`);
    }
  }
  const images = [...document.images].map(i => ({
    src: i.currentSrc || i.src, loaded: i.complete && i.naturalWidth > 0, natural: i.naturalWidth,
    shown: i.getBoundingClientRect().width, figure: !!i.closest('.cell_output')}));
  const links = [...document.querySelectorAll('a[href]')].map(a => a.href);
  const ids = [...document.querySelectorAll('[id]')].map(e => e.id);
  const details = [...article.querySelectorAll('details:not(.hide)')].map(d => ({
    open: d.open, summary: (d.querySelector('summary') || {}).textContent || '',
    hidden: [...d.children].filter(c => c.tagName !== 'SUMMARY')  // a closed details' content is not rendered
      .every(c => c.checkVisibility ? !c.checkVisibility() : c.getClientRects().length === 0)}));
  const resources = performance.getEntriesByType('resource').map(r => r.name);
  done({problems, mathCount: math.length, typeset: article.querySelectorAll('mjx-container').length,
        images, links, ids, details, resources, text: article.innerText});
});
"""


class Site:
    """The built site served on 127.0.0.1 (a free port) while the tests run."""

    def __init__(self, html: Path):
        self.html = html

        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):  # no request log in the test's output
                pass

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request, client_address):  # a page left mid-load drops its requests
                pass

        self.server = Server(("127.0.0.1", 0), functools.partial(Quiet, directory=str(html)))
        self.base = f"http://127.0.0.1:{self.server.server_port}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def status(self, url: str) -> int:
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    html = built_site(tmp_path_factory)
    served = tmp_path_factory.mktemp("served")
    shutil.copytree(html, served, dirs_exist_ok=True)  # the fault test adds a page here, not to the build
    server = Site(served)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser():
    driver = headless_chromium(WIDTH, script_timeout_s=60)
    try:
        yield driver
    finally:
        driver.quit()


def inspect(browser, site: Site, page: str) -> dict:
    """Open ``page`` and return what INSPECT saw, with ``problems`` completed on the Python side."""
    browser.get(site.base + page)
    seen = browser.execute_async_script(INSPECT, FITS)
    problems = seen["problems"]
    origin = site.base.rstrip("/")
    for img in seen["images"]:
        if not img["loaded"]:
            problems.append(f"image not loaded: {img['src']}")
        elif img["figure"] and img["shown"] < min(img["natural"], READABLE) - 1:
            problems.append(f"figure shown {img['shown']:.0f} px wide, of {img['natural']}: {img['src']}")
    problems += [f"loaded from another host: {url}" for url in seen["resources"] if not url.startswith(origin)]
    seen["internal"] = [url for url in seen["links"] if url.startswith(origin)]
    return seen


def broken_links(site: Site, pages: dict[str, dict]) -> list[str]:
    """Links inside the site to a missing file, or to an anchor missing from a visited page."""
    broken, status = [], {}
    for page, seen in pages.items():
        for url in seen["internal"]:
            target, _, anchor = url.partition("#")
            path = urllib.parse.urlparse(target).path.lstrip("/") or "index.html"
            if target not in status:
                status[target] = site.status(target)
            if status[target] != 200:
                broken.append(f"{page}: {url} (HTTP {status[target]})")
            elif anchor and path in pages and urllib.parse.unquote(anchor) not in pages[path]["ids"]:
                broken.append(f"{page}: {url} (no such anchor)")
    return broken


def test_every_page_of_the_book_renders_in_a_real_browser(site, browser):
    pages = {page: inspect(browser, site, page) for page in site_pages(site.html)
             if not page.startswith("faulty")}
    problems = {page: seen["problems"] for page, seen in pages.items() if seen["problems"]}
    assert not problems, problems
    assert not broken_links(site, pages)

    for path in build.notebooks():
        facts = notebook_facts(path)
        seen = pages[facts["page"]]
        assert seen["typeset"] >= seen["mathCount"] == facts["math"] > 0, facts["page"]  # each formula, typeset
        assert facts["colab"] in seen["links"], f"{facts['page']}: no Open in Colab link"
        answers = seen["details"]
        assert len(answers) == facts["details"] > 0, facts["page"]
        assert all(not d["open"] and d["hidden"] and d["summary"] for d in answers), (facts["page"], answers)
        figures = [i for i in seen["images"] if i["figure"]]
        assert len(figures) == facts["figures"] + facts["widgets"], facts["page"]
        if facts["widgets"]:
            assert "Live in Jupyter:" in seen["text"]

    # the API reference: its index leads to an entry of every public name (and train, evaluate), on the page
    api = pages["api.html"]
    indexed = {urllib.parse.urlparse(url).fragment for url in api["internal"]
               if url.split("#")[0].endswith("/api.html")}
    for entry in build.api_entries():
        section = re.sub(r"[^a-z0-9]+", "-", entry.title.lower()).strip("-")
        assert section in indexed and section in api["ids"], entry.name


FAULTY = """<!DOCTYPE html><html><head><meta charset="utf-8">
<script>window.MathJax = {"options": {"processHtmlClass": "tex2jax_process|mathjax_process|math|output_area"}}</script>
<script defer src="_static/mathjax/tex-chtml.js"></script></head><body><article>
<p><span class="math notranslate nohighlight">\\(a^^b\\)</span>
<span class="math notranslate nohighlight">\\(\\nosuchmacro x\\)</span></p>
<div class="cell_output"><img src="_images/no-such-figure.png"></div>
<a href="notebooks/no-such-page.html">a page</a> <a href="index.html#no-such-anchor">an anchor</a>
<details open><summary>unfolded</summary><p>shown</p></details><details><summary>folded</summary><p>hidden</p></details>
<div style="width: 640px"><div class="highlight"><pre style="overflow: auto; white-space: pre">{wide}</pre></div>
<pre style="white-space: pre-wrap; width: 100px; line-height: 16px">{short}</pre></div>
</article></body></html>
""".replace("{wide}", "x = 1  # " + "a line of code far wider than the column " * 4).replace(
    "{short}", "y = 2  # short, but squeezed")


def test_the_browser_check_fails_on_tex_errors_a_missing_image_broken_links_an_open_answer_and_wide_code(site, browser):
    (site.html / "faulty.html").write_text(FAULTY, encoding="utf-8")
    index = inspect(browser, site, "index.html")
    seen = inspect(browser, site, "faulty.html")
    problems = seen["problems"]
    assert any(p.startswith("TeX error: ") for p in problems), problems
    assert any(p.startswith("undefined macro: ") for p in problems), problems
    assert any(p.startswith("image not loaded: ") for p in problems), problems
    assert any(p.startswith("code: x = 1  # a line of code") and "scrolls sideways" in p for p in problems), problems
    assert any(p.startswith("code: y = 2") and "wraps though its lines fit" in p for p in problems), problems
    broken = broken_links(site, {"faulty.html": seen, "index.html": index})
    assert len(broken) == 2 and "HTTP 404" in broken[0] and "no such anchor" in broken[1], broken
    assert [(d["open"], d["hidden"]) for d in seen["details"]] == [(True, False), (False, True)]
