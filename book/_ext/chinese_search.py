"""Chinese search that knows the book's terms.

Sphinx indexes Chinese pages with ``jieba``, which cuts text into words with its own
dictionary (shipped inside the package: nothing is downloaded). That dictionary does not
know this book's terms: it cuts 自注意力 into 自 / 注意力, so a search for 自注意力 misses
most lessons. This extension gives jieba the Chinese terms of the glossary
(``book/glossary.md``) as a user dictionary, through ``html_search_options["dict"]``, for
a Chinese build only.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.config import Config

# The glossary is read by the same code that checks the translations' terms.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from translations import glossary_rows, term_parts  # noqa: E402

#: A frequency high enough that jieba keeps a listed term whole.
FREQUENCY = 100_000


def glossary_chinese_terms() -> list[str]:
    """The Chinese terms of the glossary, each part of ``a / b`` and ``a（b）`` on its own,
    without those that hold a space or Latin letters (jieba's dictionary has one word per
    line).

    >>> "自注意力" in glossary_chinese_terms()
    True
    """
    parts = {part for _, chinese in glossary_rows() for part in term_parts(chinese)}
    return sorted(part for part in parts if not re.search(r"[\sA-Za-z]", part))


def add_user_dictionary(app: Sphinx, config: Config) -> None:
    if not str(config.language or "").startswith("zh"):
        return
    words = Path(app.doctreedir) / "jieba_glossary.txt"
    words.parent.mkdir(parents=True, exist_ok=True)
    words.write_text(
        "".join(f"{term} {FREQUENCY}\n" for term in glossary_chinese_terms()), encoding="utf-8"
    )
    config.html_search_options = {**(config.html_search_options or {}), "dict": str(words)}


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", add_user_dictionary)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
