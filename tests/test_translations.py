"""The Chinese edition is complete, current and consistent (``tools/translations.py``).

- every catalog holds exactly the messages of its source today: a page's prose, a lesson's
  code comments, a checker module's messages (an English edit that is not carried into the
  catalogs fails here: run ``make translations``), and no catalog is left over;
- every message is translated and none is fuzzy;
- every glossary term (single-word terms too, unless the book also uses the word in another
  sense) and fixed phrase is rendered one way, no avoided rendering is used, and math (the
  prose of ``\\text{…}`` apart), code, links, numbers and a template's placeholders are kept;
- ``zh/`` is exactly what the generator writes from the English sources and the catalogs; each
  Chinese notebook is the English program (the same syntax tree, comments and the checkers'
  language setting apart) with the English outputs (the checkers' lines in Chinese), so nbval
  runs the English notebooks only;
- the package's compiled catalog, which ``attnlib.exercises`` reads, is the checkers' catalogs.
"""

from __future__ import annotations

import ast
import functools
import gettext
import json
import re
import shutil
import sys
from collections import Counter
from pathlib import Path

import polib
import pytest
from conftest import files_digest, installed_distributions

import translations

ROOT = Path(__file__).resolve().parent.parent


PAGES = translations.toc_entries()
#: The comments' and checkers' catalogs, {name: {message: where}}, read once per run.
OWN_CATALOGS = translations.own_catalogs()
CATALOGS = PAGES + list(OWN_CATALOGS)
LESSONS = [page for page in PAGES if page.startswith("lessons/")]
#: A page's catalog problems, found once per run for the two tests that read them.
catalog_problems = functools.cache(translations.check_catalog)


def template_inputs_digest() -> str:
    """A digest of what the templates are made from: the English book's sources (``book/``,
    the lessons, the configuration and the table of contents), the tools that extract them,
    the installed distributions and this Python. The package's code is not among them: the
    API page's docstrings are dropped from its template."""
    files = [ROOT / "_config.yml", ROOT / "_toc.yml", *sorted((ROOT / "tools").glob("*.py"))]
    files += sorted(p for p in (ROOT / "book").rglob("*") if p.is_file() and p.suffix != ".pyc")
    files += sorted((ROOT / "lessons").glob("*.ipynb"))
    return files_digest(files, installed_distributions(), sys.version)


@pytest.fixture(scope="module")
def templates(request, tmp_path_factory) -> Path:
    """Message templates extracted from the English sources by Sphinx's gettext builder (about
    15 s): now, unless the last run extracted them from the same sources (kept in pytest's
    cache, so that `make test-fast` after a change to the code extracts nothing; a fresh clone,
    and ``--cache-clear``, extract them)."""
    cache, digest = request.config.cache, template_inputs_digest()
    kept = cache.mkdir("attnlib-templates")
    if cache.get("attnlib/templates-digest", None) == digest and any(kept.glob("**/*.pot")):
        return kept
    out = translations.build_templates(tmp_path_factory.mktemp("i18n") / "_build" / "gettext")
    shutil.rmtree(kept)
    shutil.copytree(out, kept)
    cache.set("attnlib/templates-digest", digest)
    return out


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


@pytest.mark.parametrize("page", CATALOGS)
def test_every_message_is_translated(page):
    problems = [
        str(p) for p in catalog_problems(page) if p.what.startswith(("untranslated", "fuzzy"))
    ]
    assert not problems, "\n".join(problems[:10]) + f"\n({len(problems)} in all)"


@pytest.mark.parametrize("page", CATALOGS)
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
    from attnlib import exercises

    exercises._catalog.cache_clear()  # (another test may have changed the package catalog)
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
    """The formulas of a markdown cell without their ``\\text{…}`` prose, whitespace
    normalised (a translation translates that prose and may rewrap)."""
    return Counter(translations.math_skeleton(m) for m in translations.MATH.findall(markdown))


class WithoutStrings(ast.NodeTransformer):
    """Every string constant replaced by the same one, and an f-string by its values only."""

    def visit_Constant(self, node: ast.Constant) -> ast.Constant:
        return ast.Constant("") if isinstance(node.value, str) else node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.JoinedStr:
        node.values = [v for v in node.values if isinstance(v, ast.FormattedValue)]
        return self.generic_visit(node)


def program(source: str, language: str, strings: bool = True) -> str:
    """The syntax tree of a code cell without its docstrings (comments are not in it either),
    with the one line that differs between the editions, the checkers' language, read as
    English; without its strings' text if not ``strings``."""
    setting = translations.LANGUAGE_SETTING
    source = source.replace(setting[language], setting["en"])
    if strings:
        return translations.program_tree(source)
    return ast.dump(WithoutStrings().visit(ast.parse(source)))


def without_comments(text: list[str] | str) -> list[str]:
    """The lines of printed code, each without its comment (and the lines that were one), its
    docstrings left out."""
    code = "".join(text)
    found = {row: column for row, column, _ in translations.shell_comments(code)}
    docs = {r for d in translations.docstrings(code) for r in range(d.first, d.last + 1)}
    return [
        line[: found.get(row, len(line))].rstrip()
        for row, line in enumerate(code.splitlines())
        if row not in docs
    ]


def test_the_printed_kernel_speaks_chinese():
    """Lesson 09 prints its Triton kernel to be read line by line: in Chinese, its comments too."""
    page = translations.ZH / "lessons/09_flash_attention.ipynb"
    cells = json.loads(page.read_text(encoding="utf-8"))["cells"]
    listed = [c for c in cells if translations.LISTING_TAG in c["metadata"].get("tags", [])]
    outputs = [o for c in listed for o in c["outputs"] if o["output_type"] == "stream"]
    text = "".join("".join(o["text"]) for o in outputs)
    assert "def _forward_kernel(" in text and "# 被屏蔽的键的权重：2^(−∞) = 0" in text
    assert "moves the sums made under the old maximum" not in text


def without_caption(metadata: dict) -> dict:
    metadata = json.loads(json.dumps(metadata))
    metadata.get("mystnb", {}).get("figure", {}).pop("caption", None)
    return metadata


@pytest.mark.parametrize("page", LESSONS)
def test_chinese_notebook_is_the_english_program_with_chinese_words(page):
    """Code cells: the same syntax tree; outputs: the same, the checkers' lines apart (those
    say in Chinese what the English ones say); metadata: the same, the captions and button
    labels apart; markdown: every cell translated, its formulas kept."""
    english = json.loads((ROOT / f"{page}.ipynb").read_text(encoding="utf-8"))
    chinese = json.loads((translations.ZH / f"{page}.ipynb").read_text(encoding="utf-8"))
    assert chinese["metadata"] == english["metadata"]
    assert chinese["nbformat"] == english["nbformat"]
    assert [c["cell_type"] for c in chinese["cells"]] == [c["cell_type"] for c in english["cells"]]
    translated = checker_lines = 0
    for en, zh in zip(english["cells"], chinese["cells"]):
        en_meta, zh_meta = without_caption(en["metadata"]), without_caption(zh["metadata"])
        en_prompts, zh_prompts = en_meta.pop("mystnb", {}), zh_meta.pop("mystnb", {})
        assert zh_meta == en_meta
        assert zh_prompts == {
            k: translations.PROMPTS.get(v, v) if isinstance(v, str) else v
            for k, v in en_prompts.items()
        }
        if en["cell_type"] == "code":
            # the setup cell is the same program with its messages in Chinese
            strings = "setup" not in en["metadata"].get("tags", [])
            zh_program = program("".join(zh["source"]), "zh_CN", strings)
            assert zh_program == program("".join(en["source"]), "en", strings)
            assert zh["execution_count"] == en["execution_count"]
            assert len(zh["outputs"]) == len(en["outputs"])
            listing = translations.LISTING_TAG in en["metadata"].get("tags", [])
            for en_out, zh_out in zip(en["outputs"], zh["outputs"]):
                if listing and en_out["output_type"] == "stream":  # printed code: its comments
                    assert without_comments(zh_out["text"]) == without_comments(en_out["text"])
                    continue
                assert translations.translated_output(json.loads(json.dumps(en_out))) == zh_out
                checker_lines += json.dumps(zh_out) != json.dumps(en_out)
        else:
            translated += zh["source"] != en["source"]
            missing = math_spans("".join(en["source"])) - math_spans("".join(zh["source"]))
            assert not missing, f"math lost in translation: {list(missing.elements())[:3]}"
    markdown = sum(c["cell_type"] == "markdown" for c in english["cells"])
    assert translated == markdown, "a markdown cell is still in English"
    assert checker_lines >= 3, "the checkers' outputs should be in Chinese"


@pytest.mark.parametrize("page", LESSONS)
def test_chinese_notebook_has_chinese_comments_and_sets_chinese(page):
    chinese = json.loads((translations.ZH / f"{page}.ipynb").read_text(encoding="utf-8"))
    code = "".join("".join(c["source"]) for c in chinese["cells"] if c["cell_type"] == "code")
    assert code.count(translations.LANGUAGE_SETTING["zh_CN"]) == 1
    comments = [
        comment.msgid
        for cell in chinese["cells"]
        if cell["cell_type"] == "code"
        for comment in translations.cell_comments("".join(cell["source"]))
    ]
    chinese_comments = [c for c in comments if re.search(r"[\u4e00-\u9fff]", c)]
    # (a comment may be code or a shape, with nothing to translate)
    assert len(chinese_comments) >= 0.8 * len(comments)


@pytest.mark.parametrize("page", LESSONS)
def test_the_chinese_setup_cell_speaks_chinese(page):
    chinese = json.loads((translations.ZH / f"{page}.ipynb").read_text(encoding="utf-8"))
    setup = next(c for c in chinese["cells"] if "setup" in c["metadata"].get("tags", []))
    source = "".join(setup["source"])
    printed = [
        node.values[0].value if isinstance(node, ast.JoinedStr) else node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "print"
        for node in node.args[:1]
        if isinstance(node, (ast.Constant, ast.JoinedStr))
    ]
    assert len(printed) == 3 and all(re.search(r"[\u4e00-\u9fff]", text) for text in printed)


def test_the_package_catalog_is_compiled_from_the_checkers_catalogs():
    """attnlib reads the compiled catalog: it holds every checker message, as translated."""
    compiled = gettext.GNUTranslations(translations.PACKAGE_CATALOG.open("rb"))
    for module in translations.exercise_modules():
        name = translations.exercise_catalog(module)
        for msgid, msgstr in translations.load_translations(name, normalise=False).items():
            assert compiled.gettext(msgid) == msgstr, (name, msgid)
    assert set(compiled._catalog) - {""} == {
        msgid
        for module in translations.exercise_modules()
        for msgid in translations.checker_messages(module)
    }


@pytest.mark.parametrize("name", OWN_CATALOGS)
def test_own_catalog_holds_the_messages_of_its_source(name):
    """The comments' and checkers' catalogs hold exactly today's comments and messages."""
    catalog = polib.pofile(str(translations.catalog_path(name)))
    assert live_msgids(catalog) == set(OWN_CATALOGS[name]), (
        f"{name}: the English changed; run `make translations` and translate"
    )


def test_no_catalog_is_left_from_a_page_or_module_that_is_gone():
    expected = {translations.catalog_path(name) for name in CATALOGS}
    assert set(translations.CATALOGS.rglob("*.po")) == expected


def test_translated_code_keeps_the_program_and_places_each_comment():
    source = "# one\n# two\nx = 1  # after\n    # @title Solution 01.1\n"
    chinese = {"one\ntwo": "一\n二\n三", "after": "之后", "Solution 01.1": "参考答案 01.1"}
    result = translations.translated_code(source, chinese)
    assert result == "# 一\n# 二\n# 三\nx = 1  # 之后\n    # @title 参考答案 01.1\n"


@pytest.mark.parametrize(
    "msgid, drift, rendering",
    [
        ("a running maximum $m$", "运行最大值 $m$", "累计最大值 $m$"),
        ("and a running sum", "和运行和", "和累计和"),
        ("the far task", "远程任务", "远距离任务"),
        ("each chunk of the cache", "缓存的每一块", "缓存的每一段"),
    ],
)
def test_the_glossary_requires_one_rendering_wherever_the_term_appears(msgid, drift, rendering):
    """A whitelist: the 2026-11-28 review's drifts are refused because they are not the
    glossary's rendering, not because someone listed them."""
    pairs = translations.glossary_pairs()
    assert translations.term_problems(msgid, drift, pairs)
    assert not translations.term_problems(msgid, rendering, pairs)


def test_docstrings_are_translated_in_place_and_the_program_kept():
    source = (
        'def f(x):\n    """Return x · 2.\n\n    Twice `x`.\n    """\n    return 2 * x\n\n\n'
        'def g():\n    """The space as ␣."""    # after\n'
    )
    chinese = {
        "Return x · 2.\n\nTwice `x`.": "返回 x · 2。\n\n`x` 的两倍。",
        "The space as ␣.": "空格写作 ␣。",
    }
    result = translations.translated_code(source, chinese | {"after": "之后"})
    assert result == (
        'def f(x):\n    """返回 x · 2。\n\n    `x` 的两倍。\n    """\n    return 2 * x\n\n\n'
        'def g():\n    """空格写作 ␣。"""    # 之后\n'
    )
    assert translations.program_tree(result) == translations.program_tree(source)
    assert ast.dump(ast.parse(result)) != ast.dump(ast.parse(source))


def test_shell_comments_are_translated_and_nothing_else():
    source = 'make book    # builds it\n# a whole line\necho "no # comment" x=a#b\n'
    chinese = {"builds it": "构建", "a whole line": "一整行"}
    result = translations.translated_code(source, chinese, "bash")
    assert result == 'make book    # 构建\n# 一整行\necho "no # comment" x=a#b\n'


def test_the_pages_shell_comments_are_in_chinese():
    intro = (translations.ZH / "book" / "intro.md").read_text(encoding="utf-8")
    assert "make book    # 构建两个版本：中文版在 _build/html/zh/index.html" in intro
    assert "builds both editions" not in intro


def test_an_adapted_message_must_keep_its_adaptation(tmp_path, monkeypatch):
    catalog = polib.POFile()
    catalog.append(polib.POEntry(msgid="Run it on Colab.", msgstr="在 Colab 上运行。"))
    catalog.append(polib.POEntry(msgid="Read it.", msgstr="阅读：html/zh/index.html"))
    catalog.save(str(tmp_path / "page.po"))
    monkeypatch.setattr(translations, "CATALOGS", tmp_path)
    adapted = {("page", "Run it"): "中国大陆", ("page", "Read"): "html/zh/", ("page", "Gone"): "x"}
    monkeypatch.setattr(translations, "ADAPTED", adapted)
    found = {(p.msgid, p.what) for p in translations.check_catalog("page", pairs=[])}
    assert found == {
        ("Run it on Colab.", "adapted: must contain 中国大陆"),
        ("Gone", "ADAPTED matches 0 messages, not 1"),
    }


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


@pytest.mark.parametrize(
    ("msgid", "msgstr", "lost"),
    [
        ("about 4.1 million images", "约 410 万张图像", []),  # 4.1 × 10⁶ is not exactly 4100000.0
        ("1.3 million parameters", "130 万个参数", []),
        ("36 million pairs", "3600 万对", []),
        ("between 30 and 90 million images", "3000 万到 9000 万张图像之间", []),
        ("36 million pairs", "360 万对", ["number '36'"]),
        ("8,192 tokens", "8192 个词元", ["number '8,192'"]),
    ],
)
def test_numbers_may_be_written_with_wan_and_a_wrong_one_is_caught(msgid, msgstr, lost):
    assert translations.preserved(msgid, msgstr) == lost


@pytest.mark.parametrize("call", ['expect(x, f"{a} is wrong", a=a)', "expect(x, message)"])
def test_a_checker_message_the_catalog_cannot_hold_is_refused(tmp_path, monkeypatch, call):
    monkeypatch.setattr(translations, "ROOT", tmp_path)
    module = tmp_path / "lesson99.py"
    module.write_text(f'expect(y, "a plain {{x}} message", x=[1, 2])\n{call}\n')
    with pytest.raises(translations.Untranslatable, match=r"lesson99.py:2: a message must"):
        translations.checker_messages(module)


def test_checker_messages_are_the_written_templates(tmp_path, monkeypatch):
    """Python's own parser finds the message argument, also after a condition holding a list
    or a set with commas (Babel's extractor, which counts commas outside parentheses only,
    took a string of such a condition for the message, or found none)."""
    monkeypatch.setattr(translations, "ROOT", tmp_path)
    module = tmp_path / "lesson99.py"
    module.write_text(
        'expect(x in ["a", "b"], "{a} and {b}", a=a, b=[1, 2])\nexercise("99.1", "Do this.")\n'
        'Message("A {x}", x=1)\nexpect(\n    y != {1, 2},\n    "two "\n    "parts",\n)\n'
    )
    assert translations.checker_messages(module) == {
        "{a} and {b}": [("lesson99.py", 1)],
        "Do this.": [("lesson99.py", 2)],
        "A {x}": [("lesson99.py", 3)],
        "two parts": [("lesson99.py", 4)],
    }
