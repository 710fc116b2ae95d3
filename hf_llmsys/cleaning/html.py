"""HTML / XML markup stripping with a real parser (selectolax's lexbor engine, the HTML5 parsing algorithm)."""

from __future__ import annotations

import re

from .base import Document, DocumentStep

# Text that contains a tag, a comment, a doctype or a character reference is parsed; other text is left alone, so
# "a < b" in plain prose costs nothing and is never mangled.
MARKUP = re.compile(
    r"<(?:[a-zA-Z][\w:-]*[\s/>]|/[a-zA-Z][\w:-]*\s*>|!--|!doctype)|&(?:[a-zA-Z]+\d*|#\d+|#x[0-9a-fA-F]+);", re.I
)
# Elements whose content is never prose.
DROPPED_ELEMENTS = "script,style,noscript,template,head,svg,math,iframe,object,canvas"
# Elements that end a line in rendered text.
BLOCK_ELEMENTS = (
    "address,article,aside,blockquote,br,dd,div,dl,dt,figcaption,figure,footer,form,h1,h2,h3,h4,h5,h6,header,hr,"
    "li,main,nav,ol,p,pre,section,table,tr,td,th,ul,caption,summary,details"
)


class HtmlStrip(DocumentStep):
    """Strip HTML/XML markup, keeping the visible text.

    Parsed with selectolax (lexbor): entities are decoded (``&amp;`` -> ``&``), comments dropped, the content of
    script/style/head/noscript/template/svg dropped, and block elements (p, div, li, br, h1-h6, tr, ...) end a
    line. Text without any markup is returned unchanged. Follow with the "whitespace" step to tidy blank lines.

    Parameters:
        drop_elements: CSS selector of elements removed with their content (default: script, style, head, ...).
    """

    name = "html"

    def __init__(self, drop_elements: str = DROPPED_ELEMENTS):
        if not isinstance(drop_elements, str) or not drop_elements.strip():
            raise ValueError(f"step {self.name!r}: parameter 'drop_elements' must be a non-empty CSS selector.")
        self.drop_elements = drop_elements

    def apply(self, doc: Document) -> None:
        if MARKUP.search(doc.text):
            doc.text = strip_markup(doc.text, self.drop_elements)


def strip_markup(html: str, drop_elements: str = DROPPED_ELEMENTS) -> str:
    """The visible text of an HTML fragment or page, one line per block element."""
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(html)
    for node in tree.css(drop_elements):
        node.decompose()
    for node in tree.css(BLOCK_ELEMENTS):
        node.insert_after("\n")
    root = tree.body if tree.body is not None else tree.root
    return "" if root is None else root.text(separator="", strip=False)
