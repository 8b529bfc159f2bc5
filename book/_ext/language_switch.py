"""A link on every page to the same page in the book's other edition (English / 中文).

The English book is built into ``_build/html`` and the Chinese one into
``_build/html/zh`` (``make book``), page for page, so the other edition's copy of a page is
found by its page name. Configure with ``language_switch`` in ``_config.yml``:

    language_switch:
      label: 中文       # the link's text
      lang: zh-CN       # the other edition's language (hreflang)
      root: zh          # where the other edition's root lies, relative to this one's

The link stands above the article, at its right edge, and the page declares its
translation with ``<link rel="alternate" hreflang=...>``.
"""

from __future__ import annotations

import html
import posixpath

from sphinx.application import Sphinx


def other_edition_url(pagename: str, root: str) -> str:
    """The relative URL of ``pagename`` in the edition at ``root``.

    >>> other_edition_url("lessons/01_x", "zh")
    '../zh/lessons/01_x.html'
    >>> other_edition_url("index", "..")
    '../index.html'
    """
    up = "../" * pagename.count("/")
    return posixpath.normpath(f"{up}{root}/{pagename}.html")


def add_switch(app: Sphinx, pagename: str, templatename, context: dict, doctree) -> None:
    switch = app.config.language_switch
    if not switch:
        return
    url = html.escape(other_edition_url(pagename, switch["root"]))
    lang = html.escape(switch["lang"])
    label = html.escape(switch["label"])
    context["metatags"] = context.get("metatags", "") + (
        f'\n<link rel="alternate" hreflang="{lang}" href="{url}" />'
    )
    link = (
        f'<a class="language-switch btn btn-sm" href="{url}" hreflang="{lang}" lang="{lang}" '
        f'title="{label}">{label}</a>'
    )
    context["body"] = f'<div class="language-switch-bar">{link}</div>\n' + context.get("body", "")


def setup(app: Sphinx) -> dict:
    app.add_config_value("language_switch", {}, "html", dict)
    app.connect("html-page-context", add_switch)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
