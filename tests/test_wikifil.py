"""The text8 cleaning rules (txl_minimal/wikifil.py) on small hand-written dumps."""

import io
from xml.sax.saxutils import escape

import pytest

from txl_minimal.wikifil import clean_article, is_redirect, iter_pages, wikifil


def dump(*pages: tuple[str, str]) -> io.BytesIO:
    """A minimal MediaWiki export; the wikitext is XML-escaped exactly as in real dumps."""
    body = "".join(
        f"<page><title>{escape(t)}</title><ns>0</ns><revision>"
        f'<text xml:space="preserve">{escape(w)}</text></revision></page>'
        for t, w in pages
    )
    xml = ('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/"><siteinfo>'
           f"<sitename>Wikipedia</sitename></siteinfo>{body}</mediawiki>")
    return io.BytesIO(xml.encode("utf-8"))


@pytest.mark.parametrize("wikitext, expected", [
    ("'''Anarchism''' is a [[political philosophy]].", "anarchism is a political philosophy"),
    ("It [[self-governance|self-governed]] itself.", "it self governed itself"),  # link label
    ("A<ref name=\"x\">{{cite book|title=Junk}}</ref> B<ref name=\"x\"/> C.", "a b c"),  # refs
    ("A<ref>see <i>Junk</i> p. 3</ref> B", "a b"),  # a reference that contains tags
    ("{{Use British English|date=2014}}Text {{lang|fr|{{nested}} junk}}more", "text more"),
    ("{| class=\"wikitable\"\n|-\n| cell || {{flag|X}}\n|}\nAfter", "after"),  # table
    ("In 1984, 7 of 10.", "in one nine eight four seven of one zero"),  # digits
    ("Café Øresund naïve", "caf resund na ve"),  # non-ASCII becomes space (as text8)
    ("See [http://example.com/x?y=1 the site] or [https://a.org].", "see the site or"),  # URLs
    ("x [[de:Anarchismus]] [[fr:Anarchisme]] y", "x y"),  # interlanguage links
    ("Text. [[Category:Political culture|Anarchism]]", "text political culture"),  # category
    ("[[File:Goya.jpg|thumb|upright|200px|A [[Spain|Spanish]] print]] x", "a spanish print x"),
    ("[[Image:Map.png]] y", "y"),  # image without caption
    ("a&nbsp;b AT&T &lt;b&gt; &eacute;t&eacute; ; c", "a b at t b t c"),  # entities
    ("[[Left-wing politics|left-wing]] ideas", "left wing ideas"),  # not an image option
    ("<!-- hidden > note -->Shown <small>text</small>", "shown text"),  # comments and tags
    ("<math>x^2</math>", "x two"),  # tag content is kept, like wikifil.pl
])
def test_clean_article(wikitext, expected):
    assert clean_article(wikitext) == expected


def test_redirect_detection():
    assert is_redirect("#REDIRECT [[Computer accessibility]]")
    assert is_redirect("  #redirect[[X]]")
    assert not is_redirect("{{Redirect2|Anarchist}} Anarchism is ...")


def test_wikifil_on_a_dump():
    stream = dump(
        ("AccessibleComputing", "#REDIRECT [[Computer accessibility]] {{R from move}}"),
        ("Anarchism", "{{Redirect2|Anarchist}}\n'''Anarchism''' is a [[Political philosophy|"
                      "political philosophy]]<ref>{{cite|x}}</ref> &amp; more."),
        ("Empty", "{{only a template}}"),  # no words -> contributes nothing
        ("Albedo", "'''Albedo''' is 0.3 [[de:Albedo]]"),
    )
    assert wikifil(stream) == " anarchism is a political philosophy more albedo is zero three"


def test_iter_pages_reads_titles_and_decoded_text():
    pages = list(iter_pages(dump(("A & B", "x &lt;ref&gt; <y>"))))
    assert pages == [("A & B", "x &lt;ref&gt; <y>")]
