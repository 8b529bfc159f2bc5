"""Build the book once, with warnings as errors, and check what a reader relies on.

- the build succeeds with ``-W -n`` (warnings and broken references are errors);
- every page of ``_toc.yml`` is in the HTML;
- math is rendered by the MathJax copy shipped in the build, not by a CDN;
- each lesson page offers a Colab link to its notebook in the repository
  named in ``_config.yml`` (``tests/test_conventions.py`` checks every other place that names
  the repository).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import conventions

ROOT = Path(__file__).resolve().parent.parent


pytestmark = pytest.mark.slow
REPO_URL, _ = conventions.repository()
SCRIPT_SRC = re.compile(r"<script\b[^>]*\bsrc=\"([^\"]+)\"", re.IGNORECASE)


PAGES = conventions.toc_entries()
LESSONS = [page for page in PAGES if page.startswith("lessons/")]


def test_every_toc_page_is_built(book_html):
    missing = [page for page in PAGES if not (book_html / f"{page}.html").is_file()]
    assert not missing, f"no HTML page for these _toc.yml entries: {missing}"
    assert (book_html / "index.html").is_file()


def test_mathjax_is_served_locally(book_html):
    mathjax = book_html / "_static" / "mathjax"
    assert (mathjax / "tex-chtml.js").is_file()
    fonts = mathjax / "output" / "chtml" / "fonts" / "woff-v2"
    assert (fonts / "MathJax_Main-Regular.woff").is_file()

    local_pages = []
    for page in book_html.rglob("*.html"):
        if "_static" in page.relative_to(book_html).parts:
            continue
        text = page.read_text(encoding="utf-8")
        for src in SCRIPT_SRC.findall(text):
            remote = src.startswith(("http:", "https:", "//"))
            assert not (remote and "mathjax" in src.lower()), (
                f"{page.name} loads MathJax from {src}"
            )
            if src.endswith("_static/mathjax/tex-chtml.js"):
                local_pages.append(page)
        assert "cdn.jsdelivr.net/npm/mathjax" not in text, page
    # The introduction shows the attention formula, so it must load MathJax.
    assert book_html / f"{PAGES[0]}.html" in local_pages


def test_mathjax_config_from_myst_is_kept(book_html):
    text = (book_html / f"{PAGES[0]}.html").read_text(encoding="utf-8")
    assert "window.MathJax = " in text
    assert "processHtmlClass" in text


@pytest.mark.skipif(not LESSONS, reason="no lessons in _toc.yml yet")
@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_has_colab_link(book_html, lesson):
    url = conventions.colab_url(f"{lesson}.ipynb")
    text = (book_html / f"{lesson}.html").read_text(encoding="utf-8")
    assert url in text, f"{lesson}.html has no launch link {url}"


# The Chinese edition (zh/, built into zh/ of the HTML book).

SWITCH = re.compile(r'<a class="language-switch[^"]*" href="([^"]+)" hreflang="([^"]+)"')


def test_every_toc_page_is_built_in_chinese(book_html):
    zh = book_html / "zh"
    missing = [page for page in PAGES if not (zh / f"{page}.html").is_file()]
    assert not missing, f"no Chinese page for: {missing}"
    for page in PAGES:
        assert '<html lang="zh-CN"' in (zh / f"{page}.html").read_text(encoding="utf-8"), page


@pytest.mark.parametrize("edition", ["", "zh/"])
def test_language_switch_leads_to_the_same_page(book_html, edition):
    other = {"": ("zh/", "zh-CN"), "zh/": ("", "en")}[edition]
    for page in PAGES:
        html = (book_html / f"{edition}{page}.html").read_text(encoding="utf-8")
        links = SWITCH.findall(html)
        assert len(links) == 1, f"{edition}{page}: {len(links)} language switches"
        href, lang = links[0]
        target = (book_html / f"{edition}{page}.html").parent / href
        assert lang == other[1]
        assert target.resolve() == (book_html / f"{other[0]}{page}.html").resolve(), (page, href)


@pytest.mark.skipif(not LESSONS, reason="no lessons in _toc.yml yet")
@pytest.mark.parametrize("lesson", LESSONS)
def test_chinese_lesson_opens_the_chinese_notebook(book_html, lesson):
    text = (book_html / "zh" / f"{lesson}.html").read_text(encoding="utf-8")
    assert conventions.colab_url(f"zh/{lesson}.ipynb") in text
    assert conventions.colab_url(f"{lesson}.ipynb") not in text


def test_chinese_edition_has_chinese_theme_and_search(book_html):
    zh = book_html / "zh"
    assert "搜索" in (zh / "search.html").read_text(encoding="utf-8")  # the theme's strings
    index = (zh / "searchindex.js").read_text(encoding="utf-8")
    terms = json.loads(index[index.index("(") + 1 : index.rindex(")")])["terms"]
    for word in ("自注意力", "注意力", "位置编码", "多头注意力"):  # segmented by jieba
        assert word in terms, word
    # The glossary is jieba's user dictionary (book/_ext/chinese_search.py): 自注意力 is one
    # word, indexed wherever it stands, not only where jieba's own dictionary guesses so.
    pages = terms["自注意力"] if isinstance(terms["自注意力"], list) else [terms["自注意力"]]
    assert len(pages) >= len(LESSONS) // 2, len(pages)
