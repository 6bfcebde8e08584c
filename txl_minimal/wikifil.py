"""Turn a Wikipedia XML dump into text8-style text: lowercase a-z and single spaces.

text8 is the first 10^8 characters of Matt Mahoney's `wikifil.pl` run on
`enwik9` (a 2006 English Wikipedia dump). This is our own Python rendering of
the same rules, used to build the shipped `txl_minimal/corpus/text8-mini.txt.gz`:

1. keep only the `<text>` body of each page; skip redirect pages;
2. drop `<ref>..</ref>` references, then every other tag and `<!-- comment -->`;
3. drop `{{templates}}` and `{| tables |}`;
4. drop the address of `[http://.. label]` links, keep the label;
5. images: drop `|thumb`, `|left`, `|right`, `|200px` and the `[[Image:x|` prefix,
   keep the caption; `[[Category:Name|key]]` -> "Name" (text8 keeps category
   names as words); drop interlanguage links such as `[[de:..]]`;
6. `[[target|label]]` -> "label", `[[target]]` -> "target";
7. decode entities, lowercase, spell digits as words, everything else -> one space.

Where the 2006 regexes break on 2016-era markup we deliberately do a little
better: templates may nest (we peel them innermost-first, and before the links,
instead of leaving the tail of the outer one), references may contain tags,
links may be https, a bare `&` is not mistaken for the start of an entity (the
Perl `&[^;]*;` ate text up to the next semicolon), `File:` is treated like
`Image:`, only whole image options are dropped (Perl's `|left` also cut
"[[..|left-wing]]"), and caption-less images (also in galleries) are dropped
instead of leaking "file foo jpg".
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import BinaryIO

DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

# (pattern, replacement) pairs applied in order; the order matters, as in wikifil.pl.
_TAG_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"<!--.*?-->", re.S), ""),  # comments may contain '>'
    (re.compile(r"<ref(?:\s[^>]*[^/])?>.*?</ref>", re.S | re.I), ""),  # not <ref name=x/>
    (re.compile(r"<[^>]*>"), ""),  # all remaining tags (content kept)
]
_LINK_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\[(?:https?|ftp)://[^\] ]*"), "["),  # external link: keep label
    # Image options; whole options only, so "[[Left-wing politics|left-wing]]" survives.
    (re.compile(r"\|(?:thumb(?:nail)?|left|right|center|upright(?:=[\d.]+)?|\d+(?:x\d+)?px)"
                r"(?=\s*[|\]])", re.I), ""),
    (re.compile(r"\[\[(?:image|file):[^\[\]|]*\]\]", re.I), ""),  # image with no caption
    (re.compile(r"^[ \t]*(?:image|file):[^|\n]*", re.I | re.M), ""),  # <gallery> line
    (re.compile(r"\[\[(?:image|file):[^\[\]]*\|", re.I), ""),  # keep the caption
    (re.compile(r"\[\[category:([^|\]]*)[^\]]*\]\]", re.I), r"[[\1]]"),
    (re.compile(r"\[\[[a-z\-]*:[^\]]*\]\]"), ""),  # interlanguage: [[de:Anarchismus]]
    (re.compile(r"\[\[[^|\[\]]*\|"), "[["),  # [[target|label]] -> [[label]]
    (re.compile(r"[\[\]]"), ""),
]
_INNERMOST_BRACES = re.compile(r"\{[^{}]*\}")  # {{template}} or {| table |}, no nesting
_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]+")  # ASCII only: 'é' must become a space
_DIGIT = re.compile(r"[0-9]")
_SPACES = re.compile(r" {2,}")


def clean_article(wikitext: str) -> str:
    """Clean one article's wikitext (XML entities already decoded) to text8 form.

    Returns lowercase words separated by single spaces, without leading or
    trailing space. Example: "'''Anarchism''' is a [[politics|political]] idea"
    -> "anarchism is a political idea".
    """
    text = wikitext
    for pattern, repl in _TAG_RULES:
        text = pattern.sub(repl, text)
    # Templates go before links (wikifil.pl does it after): a template's '|'
    # inside an image caption would otherwise be taken for the caption's start.
    while True:  # peel nested {{a|{{b}}}} from the inside out
        text, n = _INNERMOST_BRACES.subn("", text)
        if n == 0:
            break
    for pattern, repl in _LINK_RULES:
        text = pattern.sub(repl, text)
    text = html.unescape(text)  # &nbsp; &eacute; ... (non-ASCII becomes a space below)
    text = _NOT_ALNUM.sub(" ", text).lower()
    text = _DIGIT.sub(lambda m: f" {DIGIT_WORDS[int(m.group())]} ", text)
    return _SPACES.sub(" ", text).strip()


def is_redirect(wikitext: str) -> bool:
    """True for redirect pages ("#REDIRECT [[Target]]"), which text8 leaves out."""
    return wikitext.lstrip()[:9].lower() == "#redirect"


def iter_pages(xml_stream: BinaryIO) -> Iterator[tuple[str, str]]:
    """Yield (title, wikitext) for every <page> of a MediaWiki XML export, streaming."""
    title, text = "", ""
    for _, elem in ET.iterparse(xml_stream, events=("end",)):
        tag = elem.tag.rsplit("}", 1)[-1]  # drop the "{http://www.mediawiki.org/...}" namespace
        if tag == "title":
            title = elem.text or ""
        elif tag == "text":
            text = elem.text or ""
        elif tag == "page":
            yield title, text
            title, text = "", ""
            elem.clear()  # keep memory flat on big dumps


def wikifil(xml_stream: BinaryIO) -> str:
    """Clean a whole dump: each non-redirect page contributes " " + its words.

    Like wikifil.pl's output the result starts with a space and has no trailing
    space, e.g. " anarchism is a political philosophy ... albedo is ...".
    """
    parts = []
    for _, wikitext in iter_pages(xml_stream):
        if is_redirect(wikitext):
            continue
        words = clean_article(wikitext)
        if words:
            parts.append(" " + words)
    return "".join(parts)
