"""The Chinese edition is complete, current and consistent (``tools/translations.py``).

- every catalog holds exactly the messages of its English page today (an English edit that
  is not carried into the catalog fails here: run ``make translations``);
- every message is translated and none is fuzzy;
- each multi-word glossary term is rendered by the glossary's Chinese form, and math, code,
  links and numbers are carried over unchanged;
- ``zh/`` is exactly what the generator writes from the English sources and the catalogs,
  and each Chinese notebook has the English notebook's code, outputs and metadata (so nbval
  runs the English notebooks only).
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from pathlib import Path

import polib
import pytest

import translations

ROOT = Path(__file__).resolve().parent.parent


PAGES = translations.toc_entries()
LESSONS = [page for page in PAGES if page.startswith("lessons/")]
#: A page's catalog problems, found once per run for the two tests that read them.
catalog_problems = functools.cache(translations.check_catalog)


@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> Path:
    """Message templates extracted now from the English sources by Sphinx's gettext builder."""
    return translations.build_templates(tmp_path_factory.mktemp("i18n") / "_build" / "gettext")


def live_msgids(catalog: polib.POFile) -> set[str]:
    return {entry.msgid for entry in catalog if not entry.obsolete}


@pytest.mark.parametrize("page", PAGES)
def test_catalog_holds_the_messages_of_the_english_page(templates, page):
    template = polib.pofile(str(templates / f"{page}.pot"))
    catalog = polib.pofile(str(translations.catalog_path(page)))
    new = live_msgids(template) - live_msgids(catalog)
    gone = live_msgids(catalog) - live_msgids(template)
    assert not new and not gone, (
        f"{page}: the English text changed; run `make translations` and translate. "
        f"New: {[m[:60] for m in sorted(new)][:5]}; gone: {[m[:60] for m in sorted(gone)][:5]}"
    )


@pytest.mark.parametrize("page", PAGES)
def test_every_message_is_translated(page):
    problems = [
        str(p) for p in catalog_problems(page) if p.what.startswith(("untranslated", "fuzzy"))
    ]
    assert not problems, "\n".join(problems[:10]) + f"\n({len(problems)} in all)"


@pytest.mark.parametrize("page", PAGES)
def test_terms_math_code_and_numbers_are_kept(page):
    problems = [str(p) for p in catalog_problems(page) if p.what.startswith(("term", "lost"))]
    assert not problems, "\n".join(problems[:10]) + f"\n({len(problems)} in all)"


def test_glossary_gives_one_chinese_term_per_english_term():
    pairs = translations.glossary_pairs()
    english, chinese = {}, {}
    for en, zh in pairs:
        english.setdefault(en.lower(), set()).add(zh)
        chinese.setdefault(zh, set()).add(en.lower())
    assert len(pairs) > 150
    assert {en: zhs for en, zhs in english.items() if len(zhs) > 1} == {}
    assert {zh: ens for zh, ens in chinese.items() if len(ens) > 1} == {}


def test_every_glossary_term_is_used_in_chinese():
    """Each glossary term's Chinese form stands in the translation of the glossary page."""
    catalog = polib.pofile(str(translations.catalog_path("book/glossary")))
    chinese = " ".join(entry.msgstr for entry in catalog)
    missing = [zh for _, zh in translations.glossary_pairs() if zh not in chinese]
    assert not missing


def test_zh_is_what_the_generator_writes(templates):
    expected = translations.generated_files(templates)
    stale = [
        str(path.relative_to(ROOT))
        for path, text in expected.items()
        if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]
    assert not stale, f"out of date (run `make translations`): {stale}"
    extra = sorted(
        str(p.relative_to(ROOT))
        for p in translations.ZH.rglob("*")
        if p.is_file() and p not in expected and "_build" not in p.parts
    )
    assert not extra, f"files in zh/ that the generator does not write: {extra}"


def math_spans(markdown: str) -> Counter:
    """The formulas of a markdown cell, whitespace normalised (a translation may rewrap)."""
    return Counter(" ".join(m.split()) for m in translations.MATH.findall(markdown))


@pytest.mark.parametrize("page", LESSONS)
def test_chinese_notebook_has_the_english_code_outputs_and_metadata(page):
    english = json.loads((ROOT / f"{page}.ipynb").read_text(encoding="utf-8"))
    chinese = json.loads((translations.ZH / f"{page}.ipynb").read_text(encoding="utf-8"))
    assert chinese["metadata"] == english["metadata"]
    assert chinese["nbformat"] == english["nbformat"]
    assert [c["cell_type"] for c in chinese["cells"]] == [c["cell_type"] for c in english["cells"]]
    translated = 0
    for en, zh in zip(english["cells"], chinese["cells"]):
        en_meta, zh_meta = dict(en["metadata"]), dict(zh["metadata"])
        en_prompts, zh_prompts = en_meta.pop("mystnb", {}), zh_meta.pop("mystnb", {})
        assert zh_meta == en_meta
        assert zh_prompts == {k: translations.PROMPTS.get(v, v) for k, v in en_prompts.items()}
        if en["cell_type"] == "code":
            assert zh["source"] == en["source"]
            assert zh["outputs"] == en["outputs"]
            assert zh["execution_count"] == en["execution_count"]
        else:
            translated += zh["source"] != en["source"]
            missing = math_spans("".join(en["source"])) - math_spans("".join(zh["source"]))
            assert not missing, f"math lost in translation: {list(missing.elements())[:3]}"
    markdown = sum(c["cell_type"] == "markdown" for c in english["cells"])
    assert translated == markdown, "a markdown cell is still in English"


@pytest.mark.parametrize("page", LESSONS)
def test_chinese_badge_opens_the_chinese_notebook(page):
    chinese = json.loads((translations.ZH / f"{page}.ipynb").read_text(encoding="utf-8"))
    first = "".join(chinese["cells"][0]["source"])
    assert f"/blob/main/zh/{page}.ipynb" in first
    assert f"/blob/main/{page}.ipynb" not in first


# The generator's placing of messages, on small examples.


def test_translate_text_places_paragraphs_tables_and_keeps_the_rest():
    text = "# A title\n\nOne paragraph\nover two lines.\n\n"
    text += "| English | Meaning |\n|---|---|\n| key | what is matched |\n"
    located = [("A title", 1), ("One paragraph over two lines.", 3), ("English", 1), ("key", 1)]
    located += [("Meaning", 1), ("what is matched", 1)]
    chinese = {
        "A title": "标题",
        "One paragraph over two lines.": "一段话。",
        "English": "英文",
        "Meaning": "含义",
        "key": "key",
        "what is matched": "被匹配的内容",
    }
    result = translations.translate_text(text, located, chinese, frozenset({"key"}))
    assert result == "# 标题\n\n一段话。\n\n| 英文 | 含义 |\n|---|---|\n| key | 被匹配的内容 |\n"


def test_translate_text_fails_loudly_for_a_message_it_cannot_place():
    with pytest.raises(translations.Untranslatable, match="cannot find"):
        translations.translate_text("Some text.\n", [("Other text.", 1)], {"Other text.": "别的"})


def test_a_message_without_chinese_is_reported(tmp_path, monkeypatch):
    page = PAGES[0]
    before = {p.msgid for p in translations.check_catalog(page) if p.what == "untranslated"}
    catalog = polib.pofile(str(translations.catalog_path(page)))
    entry = next(e for e in catalog if e.msgstr and e.msgstr != e.msgid)
    entry.msgstr = ""
    monkeypatch.setattr(translations, "CATALOGS", tmp_path)
    path = tmp_path / f"{page}.po"
    path.parent.mkdir(parents=True)
    catalog.save(str(path))
    problems = translations.check_catalog(page)
    after = {p.msgid for p in problems if p.what == "untranslated"}
    assert after - before == {entry.msgid}
