"""The Chinese edition: gettext catalogs in, Chinese notebooks and pages out.

One set of translations, in the standard format: ``locale/zh_CN/LC_MESSAGES/<page>.po``,
one catalog per page of the book. Sphinx's gettext builder extracts the messages (one per
paragraph, heading, list item, table cell or caption, in MyST source form) and
``sphinx-intl`` merges them into the catalogs, marking changed ones fuzzy. From the
catalogs this tool writes the Chinese sources under ``zh/``: every lesson notebook with
its markdown translated (code, outputs and metadata identical to the English notebook),
the Markdown pages, and ``zh/_config.yml`` and ``zh/_toc.yml``. ``make book`` builds
them into ``_build/html/zh``.

    python tools/translations.py extract    # English changed: update the catalogs
    python tools/translations.py check      # what is untranslated, fuzzy or inconsistent
    python tools/translations.py generate   # write zh/ from the English sources and catalogs
    python tools/translations.py stats      # messages and words translated

``make translations`` runs extract, check, then generate. ``tests/test_translations.py`` fails
while a message is untranslated or fuzzy, a term disagrees with the glossary, or ``zh/``
differs from what ``generate`` writes.
"""

from __future__ import annotations

import argparse
import ast
import functools
import inspect
import io
import json
import re
import shutil
import string
import sys
import tokenize
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import polib
import yaml

from conventions import SETUP_TAG, run_tool, setup_cell, toc_entries  # toc_entries: root first

ROOT = Path(__file__).resolve().parent.parent
LOCALE_DIR = ROOT / "locale"
CATALOGS = LOCALE_DIR / "zh_CN" / "LC_MESSAGES"
ZH = ROOT / "zh"
GETTEXT_OUT = ROOT / "_build" / "i18n" / "_build" / "gettext"  # doctrees apart from the HTML
LANGUAGE = "zh_CN"

GENERATED = "# Written by `python tools/translations.py generate` from ../{}. Do not edit.\n"

#: The labels of the folded cells' buttons (cell metadata ``mystnb``, set by
#: ``tools/conventions.py``): the only metadata that the Chinese notebooks change.
PROMPTS = {
    "Show the Colab setup cell": "显示 Colab 安装单元格",
    "Hide the Colab setup cell": "隐藏 Colab 安装单元格",
    "Show the solution": "显示参考答案",
    "Hide the solution": "隐藏参考答案",
}

#: MyST-NB numbers the lines of a notebook as (cell index + 1) * 10000 + line + 1.
CELL_LINES = 10000

MATH = re.compile(r"\$\$.+?\$\$|\$[^$]+\$", re.DOTALL)  # display, then inline
CODE = re.compile(r"``.+?``|`[^`\n]+`")
ROLE = re.compile(r"\{[a-z:]+\}`[^`]+`")
URL = re.compile(r"\]\(([^)\s]+)\)|(?:href|src)=\"([^\"]+)\"")
NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*")


# ----------------------------------------------------------------------------- catalogs


def catalog_path(page: str) -> Path:
    """``lessons/01_x`` -> ``locale/zh_CN/LC_MESSAGES/lessons/01_x.po``."""
    return CATALOGS / f"{page}.po"


def source_path(page: str) -> Path:
    """The English source of a page: a notebook or a Markdown file."""
    notebook = ROOT / f"{page}.ipynb"
    return notebook if notebook.is_file() else ROOT / f"{page}.md"


def build_templates(out: Path = GETTEXT_OUT) -> Path:
    """Run Sphinx's gettext builder on the English book; return the folder of ``.pot`` files.

    Messages that come from outside a page's own source (the API page's docstrings, which
    are code and stay in English) are dropped, so each template holds the page's prose only.
    """
    shutil.rmtree(out, ignore_errors=True)  # templates of renamed pages must not linger
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    command = [str(jupyter_book), "build", str(ROOT), "--builder", "custom"]
    command += ["--custom-builder", "gettext", "--path-output", str(out.parent.parent)]
    run_tool(command)
    for page in toc_entries():
        pot = out / f"{page}.pot"
        template = polib.pofile(str(pot))
        own = Path(source_path(page)).name
        for entry in list(template):
            entry.occurrences = [(f, n) for f, n in entry.occurrences if Path(f).name == own]
            if not entry.occurrences:
                template.remove(entry)
        template.save(str(pot))
    return out


def is_trivial(text: str) -> bool:
    """True for a message with nothing to translate: math, code, numbers, symbols only."""
    rest = ROLE.sub("", CODE.sub("", MATH.sub("", text)))
    rest = re.sub(r"<[^>]+>|\[[^\]]*\]\([^)]*\)", "", rest)
    return not re.search(r"[A-Za-z]{2,}", rest)


def is_chinese(text: str) -> bool:
    """True for a message already in Chinese (the 中文 cells of the key-terms tables)."""
    return bool(re.search(r"[\u4e00-\u9fff]", text)) and not re.search(r"[A-Za-z]{3,}", text)


def colab_badge_zh(text: str) -> str | None:
    """The Chinese notebook's Colab badge for an English badge message, else None."""
    if "colab.research.google.com/github/" not in text:
        return None
    return re.sub(r"(/blob/[^/]+/)(lessons/)", r"\1zh/\2", text).replace(
        'alt="Open in Colab"', 'alt="在 Colab 中打开"'
    )


def autofill(catalog: polib.POFile, term_cells: bool = True) -> None:
    """Fill the messages that carry nothing to translate.

    Copied as they are: math, code and numbers only; Chinese already; an English term of
    the glossary standing alone (the English column of the key-terms tables, which the
    Chinese edition keeps). The Colab badge gets the address of the Chinese notebook.
    """
    terms = glossary_terms()
    for entry in catalog:
        if entry.obsolete or (entry.msgstr and "fuzzy" not in entry.flags):
            continue
        badge = colab_badge_zh(entry.msgid)
        if badge is not None:
            entry.msgstr = badge
        elif (
            is_trivial(entry.msgid)
            or is_chinese(entry.msgid)
            or (term_cells and is_term_cell(entry.msgid, terms))
        ):
            entry.msgstr = entry.msgid
        else:
            continue
        if "fuzzy" in entry.flags:
            entry.flags.remove("fuzzy")


def extract() -> None:
    """Update every catalog from the English sources (new messages empty, changed ones fuzzy)."""
    pots = build_templates()
    command = [str(Path(sys.executable).parent / "sphinx-intl"), "update", "-p", str(pots)]
    command += ["-l", LANGUAGE, "-d", str(LOCALE_DIR), "-w", "0"]
    run_tool(command)
    for page in toc_entries():
        catalog = polib.pofile(str(catalog_path(page)), wrapwidth=0)
        # Messages the English text no longer has are history, not translations to keep.
        for entry in catalog.obsolete_entries():
            catalog.remove(entry)
        autofill(catalog)
        set_header(catalog, page)
        catalog.save(str(catalog_path(page)))
    for name, messages in own_catalogs().items():
        update_catalog(name, messages)
    share_translations(
        [code_catalog(page) for page in toc_entries() if page.startswith("lessons/")]
    )


def share_translations(names: list[str]) -> None:
    """Fill a message untranslated in one catalog from another that translates it (the
    comments of the setup cell, the same in every lesson)."""
    catalogs = {name: polib.pofile(str(catalog_path(name)), wrapwidth=0) for name in names}
    known = {e.msgid: e.msgstr for c in catalogs.values() for e in c if e.msgstr and not e.fuzzy}
    for name, catalog in catalogs.items():
        missing = [e for e in catalog if not e.msgstr and e.msgid in known]
        for entry in missing:
            entry.msgstr = known[entry.msgid]
        if missing:
            catalog.save(str(catalog_path(name)))


# ----------------------------------------------------------------------------- code comments
#
# The comments of the lessons' code cells are messages too, one catalog per lesson:
# ``code/lessons/<page>.po``. A block of full-line comments is one message (its lines joined
# by newlines, so the translation may break its lines anew); a comment after code is one
# message of one line. The Chinese notebook is the English one with its comments replaced:
# the same program, as ``tests/test_translations.py`` proves with the syntax trees.

PRAGMA = re.compile(r"^\s*(noqa|type:|fmt:|pragma|pylint)")
COLAB_TITLE = "@title "


@dataclass(frozen=True)
class Comment:
    """A comment of a code cell: its message, and where it stands (0-based lines)."""

    msgid: str
    first: int  # the first line
    last: int  # the last line (a block of full-line comments spans several)
    column: int
    full_line: bool


def python_comments(source: str) -> list[tuple[int, int, str]]:
    """(line, column, text) of every comment of Python code (0-based line)."""
    return [
        (token.start[0] - 1, token.start[1], token.string)
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]


SHELL_COMMENT = re.compile(r"""^(?:[^'"#]|'[^']*'|"[^"]*"|(?<=\S)#)*?(?:(?<=\s)|^)(#.*)$""")


def shell_comments(source: str) -> list[tuple[int, int, str]]:
    """(line, column, text) of every comment of shell commands: a ``#`` that starts a word
    outside quotes, to the end of its line."""
    found = []
    for row, line in enumerate(source.splitlines()):
        match = SHELL_COMMENT.match(line)
        if match:
            found.append((row, match.start(1), match[1]))
    return found


#: How the comments of each kind of code are found: Python's tokenizer for code that runs; a
#: ``#`` that starts a word outside quotes for shell commands and for a printed listing (a
#: lesson's output that shows source code, perhaps only some of its lines, so not always
#: something the tokenizer accepts).
COMMENTS = {"python": python_comments, "bash": shell_comments, "listing": shell_comments}
#: The tag of a code cell whose printed output is source code: its comments are translated too.
LISTING_TAG = "listing"


def cell_comments(source: str, language: str = "python") -> list[Comment]:
    """The comments of one code cell, full-line comments on adjacent lines in one block."""
    lines = source.splitlines()
    comments: list[Comment] = []
    for row, column, token in COMMENTS[language](source):
        text = token[1:].removeprefix(" ").rstrip()
        if not text.strip() or PRAGMA.match(text):
            continue
        full_line = not lines[row][:column].strip()
        previous = comments[-1] if comments else None
        title = text.startswith(COLAB_TITLE)
        if (
            full_line
            and not title
            and previous is not None
            and previous.full_line
            and previous.last == row - 1
            and previous.column == column
            and not previous.msgid.startswith(COLAB_TITLE)
        ):
            comments[-1] = Comment(previous.msgid + "\n" + text, previous.first, row, column, True)
        else:
            comments.append(Comment(text, row, row, column, full_line))
    return comments


def comment_message(comment: Comment) -> str:
    """The catalog's message for a comment: its text, without a Colab form's ``@title``."""
    return comment.msgid.removeprefix(COLAB_TITLE)


@dataclass(frozen=True)
class Docstring:
    """A docstring of a code cell: its message (the text, its indentation removed) and where
    its literal stands (0-based lines, columns as ``ast`` counts them)."""

    msgid: str
    first: int
    column: int
    last: int
    end: int


def docstrings(source: str) -> list[Docstring]:
    """The docstrings of the functions, classes and module in Python code (none where the code
    does not parse: a listing of some lines only)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    lines = source.splitlines()

    def column(row: int, offset: int) -> int:  # ast counts UTF-8 bytes, a str characters
        return len(lines[row].encode()[:offset].decode())

    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = node.body[0] if node.body else None
            literal = getattr(first, "value", None)
            if isinstance(first, ast.Expr) and isinstance(literal, ast.Constant):
                if isinstance(literal.value, str) and not is_trivial(literal.value):
                    start_row, end_row = literal.lineno - 1, literal.end_lineno - 1
                    where = (start_row, column(start_row, literal.col_offset))
                    end = (end_row, column(end_row, literal.end_col_offset))
                    found.append(Docstring(inspect.cleandoc(literal.value), *where, *end))
    return sorted(found, key=lambda d: (d.first, d.column))


def docstring_literal(english: str, chinese: str, column: int) -> str:
    """The literal of a translated docstring, written as the English one is: its quotes, its
    indentation, its closing quotes on a line of their own or not."""
    quote = english[english.index(english.lstrip("rRuU")[0]) :][:3]
    quote = quote if quote in ('"""', "'''") else quote[0]
    prefix = english[: english.index(quote)]
    indent = " " * column
    if "r" not in prefix.lower():
        chinese = chinese.replace("\\", "\\\\")
    lines = chinese.split("\n")
    body = lines[0] + "".join("\n" + (indent + line if line else "") for line in lines[1:])
    closing = "\n" + indent if english[: -len(quote)].rstrip(" ").endswith("\n") else ""
    return f"{prefix}{quote}{body}{closing}{quote}"


def program_tree(source: str) -> str:
    """The syntax tree of Python code without its docstrings: what the Chinese notebook's
    code must share with the English (comments are not in a tree; docstrings are)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = node.body[0] if node.body else None
            literal = getattr(first, "value", None)
            if isinstance(first, ast.Expr) and isinstance(literal, ast.Constant):
                if isinstance(literal.value, str):
                    literal.value = ""
    return ast.dump(tree)


def translated_docstrings(source: str, translations: dict[str, str]) -> str:
    """Python code with every docstring in Chinese (and nothing else changed)."""
    lines = source.splitlines(keepends=True)
    for doc in reversed(docstrings(source)):
        head, tail = lines[doc.first][: doc.column], lines[doc.last][doc.end :]
        english = "".join(lines[doc.first : doc.last + 1])
        english = english[doc.column : len(english) - len(tail)]
        literal = docstring_literal(english, translations[doc.msgid], doc.column)
        lines[doc.first : doc.last + 1] = [head + literal + tail]
    return "".join(lines)


def translated_code(source: str, translations: dict[str, str], language: str = "python") -> str:
    """A code cell with every comment and docstring in Chinese (and nothing else changed)."""
    if language in ("python", "listing"):
        source = translated_docstrings(source, translations)
    lines = source.splitlines(keepends=True)
    for comment in reversed(cell_comments(source, language)):
        chinese = translations[comment_message(comment)]
        if comment.msgid.startswith(COLAB_TITLE):
            chinese = COLAB_TITLE + chinese
        line = lines[comment.last]
        ending = line[len(line.rstrip("\r\n")) :]
        if comment.full_line:
            indent = " " * comment.column
            block = [f"{indent}# {text}".rstrip() + "\n" for text in chinese.split("\n")]
            block[-1] = block[-1].rstrip("\n") + ending
            lines[comment.first : comment.last + 1] = block
        else:
            code = line[: comment.column]
            lines[comment.last] = f"{code}# {chinese}{ending}"
    return "".join(lines)


def code_catalog(page: str) -> str:
    """The name of a lesson's catalog of code comments: ``code/lessons/<name>``."""
    return f"code/{page}"


#: A Markdown page's fenced code blocks whose comments are translated.
CODE_BLOCK = re.compile(r"^( *)```(python|bash)\n(.*?)^\1```$", re.DOTALL | re.MULTILINE)


def code_pieces(page: str) -> list[tuple[str, int, str]]:
    """The code of a page, the line each piece starts on and its language: a notebook's code
    cells (numbered as MyST-NB numbers them), a Markdown page's fenced ``python`` and
    ``bash`` blocks."""
    source = source_path(page).read_text(encoding="utf-8")
    if source_path(page).suffix == ".md":
        return [
            (block[3], source.count("\n", 0, block.start(3)) + 1, block[2])
            for block in CODE_BLOCK.finditer(source)
        ]
    pieces = []
    for index, cell in enumerate(json.loads(source)["cells"]):
        if cell["cell_type"] == "code":
            pieces.append(("".join(cell["source"]), (index + 1) * CELL_LINES + 1, "python"))
            pieces += [(text, (index + 1) * CELL_LINES + 1, "listing") for text in listings(cell)]
    return pieces


def listings(cell: dict) -> list[str]:
    """The source code that a cell tagged ``listing`` prints (its stream outputs)."""
    if LISTING_TAG not in cell.get("metadata", {}).get("tags", []):
        return []
    return [
        "".join(output["text"])
        for output in cell.get("outputs", [])
        if output.get("output_type") == "stream"
    ]


def comment_messages(page: str) -> dict[str, list[tuple[str, int]]]:
    """{message: [(file, line)]} of every comment of a page's code, in order."""
    messages: dict[str, list[tuple[str, int]]] = {}
    for code, first_line, language in code_pieces(page):
        found = [(comment_message(c), c.first) for c in cell_comments(code, language)]
        if language in ("python", "listing"):
            found += [(doc.msgid, doc.first) for doc in docstrings(code)]
        for message, line in sorted(found, key=lambda item: item[1]):
            messages.setdefault(message, []).append((source_path(page).name, first_line + line))
    return messages


# ----------------------------------------------------------------------------- checkers' messages
#
# Everything attnlib's exercise checkers say is written as an English template in the call
# that says it: ``expect(ok, "template", **values)``, ``phrase("template")``,
# ``Message("template", ...)`` and ``@exercise(id, "title")``. One catalog per checker module,
# ``exercises/<module>.po``; ``generate`` compiles them all into the package's
# ``attnlib/locale/zh_CN/LC_MESSAGES/attnlib.mo``, which ``attnlib.exercises`` reads.

EXERCISES = ROOT / "attnlib" / "exercises"
PACKAGE_CATALOG = ROOT / "attnlib" / "locale" / LANGUAGE / "LC_MESSAGES" / "attnlib.mo"
#: The callables whose argument is a message, and which argument it is.
MESSAGE_ARGUMENT = {"expect": 1, "exercise": 1, "phrase": 0, "Message": 0}


def exercise_modules() -> list[Path]:
    return sorted(EXERCISES.glob("*.py"))


def exercise_catalog(module: Path) -> str:
    """``attnlib/exercises/lesson02.py`` -> ``exercises/lesson02``."""
    return f"exercises/{module.stem.replace('__init__', 'common')}"


def message_calls(module: Path) -> list[tuple[ast.Call, ast.expr]]:
    """Every call of ``MESSAGE_ARGUMENT`` in a module, with its message argument."""
    calls = []
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", getattr(node.func, "attr", None))
            position = MESSAGE_ARGUMENT.get(name)
            if position is not None and len(node.args) > position:
                calls.append((node, node.args[position]))
    return calls


def checker_messages(module: Path) -> dict[str, list[tuple[str, int]]]:
    """{message: [(file, line)]} of a checker module; a message that is not written out
    as a string raises (the catalog could not hold it).

    Python's own parser finds the arguments, not Babel's extractor (``extract_python``): Babel
    counts them by the commas outside parentheses, so a list or a set in ``expect``'s condition
    moves the message (on these checkers it lost two, both in lesson 07)."""
    messages: dict[str, list[tuple[str, int]]] = {}
    relative = str(module.relative_to(ROOT))
    for call, argument in message_calls(module):
        if not (isinstance(argument, ast.Constant) and isinstance(argument.value, str)):
            if module.name == "__init__.py":
                continue  # the machinery passes on the messages written in the checkers
            raise Untranslatable(
                f"{relative}:{call.lineno}: a message must be written out as a string "
                f"(a template with named values), not {ast.unparse(argument)[:60]!r}"
            )
        messages.setdefault(argument.value, []).append((relative, call.lineno))
    return messages


def own_catalogs() -> dict[str, dict[str, list[tuple[str, int]]]]:
    """The catalogs this tool keeps itself (not Sphinx): {name: {message: occurrences}}."""
    catalogs = {}
    for page in toc_entries():
        comments = comment_messages(page)
        if comments:
            catalogs[code_catalog(page)] = comments
    for module in exercise_modules():
        catalogs[exercise_catalog(module)] = checker_messages(module)
    return catalogs


def all_catalogs() -> list[str]:
    """Every catalog: the pages' (from Sphinx), then the code comments' and the checkers'."""
    return list(toc_entries()) + list(own_catalogs())


def update_catalog(name: str, messages: dict[str, list[tuple[str, int]]]) -> None:
    """Make catalog ``name`` hold exactly ``messages``: translations of the ones it has are
    kept, new ones come empty (or filled, when there is nothing to translate)."""
    path = catalog_path(name)
    old = polib.pofile(str(path), wrapwidth=0) if path.is_file() else polib.POFile(wrapwidth=0)
    kept = {entry.msgid: entry for entry in old if not entry.obsolete}
    catalog = polib.POFile(wrapwidth=0)
    set_header(catalog, name)
    for msgid, where in messages.items():
        entry = kept.get(msgid) or polib.POEntry(msgid=msgid, msgstr="")
        entry.occurrences = where
        if name.startswith("exercises/") and "{" in msgid:
            entry.flags = sorted(set(entry.flags) | {"python-brace-format"})
        catalog.append(entry)
    autofill(catalog, term_cells=False)  # (a comment or a hint is not a key-terms table)
    path.parent.mkdir(parents=True, exist_ok=True)
    catalog.save(str(path))


def set_header(catalog: polib.POFile, name: str) -> None:
    """Give a catalog its header: what it translates, for whom, in which language."""
    catalog.header = f"Chinese (zh_CN) translation of {name}, Self-Attention, Step by Step."
    catalog.metadata = catalog_metadata(name)
    catalog.metadata_is_fuzzy = False


def catalog_metadata(name: str) -> dict[str, str]:
    """The header of every catalog: what it is, in which language."""
    return {
        "Project-Id-Version": f"Self-Attention, Step by Step: {name}",
        "Language": LANGUAGE,
        "Language-Team": "the book's authors",
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=utf-8",
        "Content-Transfer-Encoding": "8bit",
        "Plural-Forms": "nplurals=1; plural=0;",
    }


def compiled_catalog() -> polib.MOFile:
    """The checkers' catalogs as one compiled catalog (what the package reads)."""
    compiled = polib.MOFile()
    compiled.metadata = catalog_metadata("attnlib")
    for module in exercise_modules():
        for msgid, msgstr in load_translations(exercise_catalog(module), normalise=False).items():
            compiled.append(polib.MOEntry(msgid=msgid, msgstr=msgstr))
    return compiled


def placeholders(template: str) -> Counter:
    """The named fields of a template: ``"{n} rows of {d:.2f}"`` -> {n, d:.2f}."""
    return Counter(
        f"{name}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}"
        for _, name, spec, conversion in string.Formatter().parse(template)
        if name is not None
    )


# ----------------------------------------------------------------------------- glossary


GLOSSARY = ROOT / "book" / "glossary.md"


def glossary_rows() -> list[tuple[str, str]]:
    """The (English, 中文) term cells of each row of ``book/glossary.md``, as written."""
    rows = []
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 4 and cells[0] not in ("English", "---"):
            rows.append((cells[0], cells[1]))
    return rows


def term_parts(cell: str) -> list[str]:
    """The terms of a cell written ``a / b`` or ``a (b)``: ``["a", "b"]``."""
    return [part.strip() for part in re.split(r"\s/\s|[()（）]", cell) if part.strip()]


def glossary_pairs() -> list[tuple[str, str]]:
    """The terminology table: (English term, Chinese term) from ``book/glossary.md``.

    A row such as ``| causal mask (sequence mask) | 因果掩码（序列掩码） |`` gives the main
    pair ("causal mask", "因果掩码"); ``a / b`` rows give one pair per side.
    """
    pairs = []
    for english, chinese in glossary_rows():
        english = re.sub(r"\s*\(.*?\)\s*$", "", english)
        chinese = re.sub(r"（.*?）$", "", chinese).strip()
        en_parts, zh_parts = english.split(" / "), chinese.split(" / ")
        if len(en_parts) == len(zh_parts):
            pairs += list(zip((e.strip() for e in en_parts), (z.strip() for z in zh_parts)))
    return pairs


def glossary_terms() -> set[str]:
    """Every term cell of the glossary, English and Chinese, as written (``causal mask
    (sequence mask)``, ``因果掩码（序列掩码）``), and each part of an ``a / b`` or ``a (b)``
    cell."""
    terms = set()
    for row in glossary_rows():
        for cell in row:
            terms.add(cell)
            terms.update(term_parts(cell))
    return terms


def is_term_cell(text: str, terms: set[str] | None = None) -> bool:
    """True for a key-terms table's term cell: glossary terms only, alone or joined as
    ``a / b`` or ``a (b)`` (``causal mask / sequence mask``, ``因果掩码（序列掩码）``)."""
    terms = glossary_terms() if terms is None else terms
    parts = term_parts(text)
    return text in terms or (bool(parts) and all(part in terms for part in parts))


@functools.cache
def term_pattern(english: str) -> re.Pattern:
    """A whole-phrase, case-insensitive match of an English term (plural -s allowed)."""
    words = [re.escape(word) for word in english.split()]
    return re.compile(r"(?<![\w-])" + r"\s+".join(words) + r"(?:s|es)?(?![\w-])", re.IGNORECASE)


# ----------------------------------------------------------------------------- checks


@dataclass
class Problem:
    page: str
    msgid: str
    what: str

    def __str__(self) -> str:
        return f"{self.page}: {self.what}\n    msgid: {self.msgid[:100]!r}"


TEXT_IN_MATH = re.compile(r"\\text\{[^{}]*\}")
CHINESE_NUMBER = re.compile(r"(\d+(?:\.\d+)?)\s*(万|亿)")
SCALED_NUMBER = re.compile(r"(\d[\d,]*(?:\.\d+)?)\s+(thousand|million|billion)")
#: The first number of a range whose scale word comes after the second: "30 and 90 million".
SCALED_RANGE_START = re.compile(
    r"(\d[\d,]*(?:\.\d+)?)\s+(?:and|to|or)\s+\d[\d,]*(?:\.\d+)?\s+(thousand|million|billion)"
)
#: The words that multiply a number, in both languages.
SCALE = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "万": 1e4, "亿": 1e8}


def math_skeleton(formula: str) -> str:
    """A formula with the prose of its ``\\text{…}`` left out (a translation translates it)
    and its whitespace normalised: what a translation must keep exactly.

    >>> math_skeleton(r"$x_t \\text{ for all } t$") == math_skeleton(r"$x_t \\text{ 对所有 } t$")
    True
    """
    return " ".join(TEXT_IN_MATH.sub(r"\\text{}", formula).split())


def chinese_numbers(text: str) -> set[float]:
    """The values written with 万 or 亿 in Chinese text: "3600 万" -> 36,000,000."""
    return {round(float(n) * SCALE[unit]) for n, unit in CHINESE_NUMBER.findall(text)}


def preserved(msgid: str, msgstr: str) -> list[str]:
    """What the translation lost of the untouchables: math (apart from the prose inside its
    ``\\text{…}``), code, roles, links and numbers (a large number may be written with 万 or
    亿, as Chinese counts)."""
    lost = []
    zh_formulas = Counter(math_skeleton(span) for span in MATH.findall(msgstr))
    for span, count in Counter(math_skeleton(span) for span in MATH.findall(msgid)).items():
        if zh_formulas[span] < count:
            lost.append(f"math {span!r}")
    for name, pattern in (("code", CODE), ("role", ROLE)):
        for span in pattern.findall(msgid):
            if msgstr.count(span) < msgid.count(span):
                lost.append(f"{name} {span!r}")
    for groups in URL.findall(msgid):
        target = groups[0] or groups[1]
        if target not in msgstr and "colab.research.google.com" not in target:
            lost.append(f"link {target!r}")
    plain = ROLE.sub("", CODE.sub("", MATH.sub("", URL.sub("", msgid))))
    zh_plain = ROLE.sub("", CODE.sub("", MATH.sub("", URL.sub("", msgstr))))
    scaled = {
        n: round(float(n.replace(",", "")) * SCALE[w])
        for pattern in (SCALED_NUMBER, SCALED_RANGE_START)
        for n, w in pattern.findall(plain)
    }
    for number in set(NUMBER.findall(plain)):
        value = float(number.replace(",", "")) if re.fullmatch(r"[\d,]+", number) else None
        values = {value, scaled.get(number)}
        written = re.search(rf"(?<![\d.]){re.escape(number)}(?![\d]|[.,]\d)", zh_plain)
        if not written and not values & chinese_numbers(zh_plain):
            lost.append(f"number {number!r}")
    return lost


#: Renderings the edition does not use, each with the one it does (the zh review of
#: 2026-11-25 found several renderings of each). Checked in every catalog.
AVOIDED = {
    "视野": "感受野 (reach)",
    "可及范围": "感受野 (reach)",
    "信息可达范围": "感受野 (reach)",
    "融合核": "融合内核 (fused kernel; 核函数 is the kernel methods')",
    "改动实验": "修改实验 (Change the experiment)",
    "改一改实验": "修改实验 (Change the experiment)",
    "改变实验": "修改实验 (Change the experiment)",
    "检查器": "检查程序 (checker)",
    "批次大小": "批量大小 (batch size)",
    "未尝试": "尚未作答 (not attempted)",
    "逻辑值": "logits (逻辑值 reads as a Boolean value)",
    "运行状态": "累积状态 (running state)",
    "递推状态": "累积状态 (running state)",
    "源文档": "参考资料 (Source documents)",
    "线性整流函数": "ReLU",
    "LeeDL 教程": "《深度学习详解》",
    "自注意力，一步一步": "循序渐进学自注意力 (the book's title)",
}

#: Recurring phrases that are not terms of the glossary: the book's title and its labels.
PHRASES = {
    "Self-Attention, Step by Step": "循序渐进学自注意力",
    "Change the experiment": "修改实验",
    "not attempted": "尚未作答",
    "Source documents": "参考资料",
}

#: Messages whose Chinese is meant to say more than the English, or something else: what a
#: reader in mainland China needs (the Chinese edition's own paths, the services that cannot
#: be reached there). {(catalog, the msgid's start): text the Chinese must contain}. ``check``
#: fails when one of these no longer matches exactly one message, or when its Chinese lost the
#: adaptation, so that a retranslation cannot undo it by accident.
ADAPTED = {
    ("code/book/intro", "builds both editions"): "中文版",
    ("book/intro", "**Run it on Colab.**"): "{ref}`setup-offline`",
    ("book/course", "**No installation**"): "{ref}`setup-offline`",
    ("book/setup", "Colab, GitHub and the default package index"): "中国大陆",
    ("book/setup", "**Read without running.**"): "`html/zh/index.html`（中文版）",
    ("book/setup", "**On a Jupyter platform that you can reach.**"): "国内",
}

#: Single-word glossary terms that the book also uses in another sense: for these, the
#: glossary's Chinese is not required wherever the word appears (every other single-word
#: term is checked like a multi-word one).
OTHER_SENSES = {
    "attention": "to pay attention",
    "block": "to block",
    "embedding": "inside names such as rotary position embedding (旋转位置编码)",
    "error": "an error that code raises (错误), beside a numerical error (误差)",
    "frame": "a frame of zeros around an image",
    "hop": "a frame's hop (帧移) and a graph's hop (跳)",
    "kernel": "a convolution's kernel, a GPU kernel and the kernel methods' kernel",
    "key": "a key of a dictionary or of a lock",
    "memory": "a computer's memory (内存) and a model's memory (记忆)",
    "neighbourhood": "the neighbourhood one lives in",
    "patch": "a fix",
    "rank": "to rank",
    "vocabulary": "the vocabulary of a field",
    "window": "Windows, the operating system",
}


def key_term_cells(page: str) -> set[str]:
    """The English cells of a page's key-terms tables (those headed ``| English | 中文 |``):
    the Chinese edition keeps them in English, beside the Chinese column."""
    source = source_path(page).read_text(encoding="utf-8")
    if source_path(page).suffix == ".ipynb":
        cells = json.loads(source)["cells"]
        source = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    found = set()
    for table in re.findall(r"^\| *English *\| *中文 *\|.*?(?=^[^|]|\Z)", source, re.M | re.S):
        for row in table.splitlines()[2:]:
            start, end = split_table_row(row)[0]
            found.add(" ".join(row[start:end].split()))
    return found


def term_problems(msgid: str, msgstr: str, pairs: list[tuple[str, str]]) -> list[str]:
    """The glossary terms and fixed phrases of ``msgid`` that ``msgstr`` renders otherwise,
    and the avoided renderings it uses."""
    problems = [f"uses {bad}: write {good}" for bad, good in AVOIDED.items() if bad in msgstr]
    msgid = re.sub(r"\{\w*(![rsa])?(:[^{}]*)?\}", " ", msgid)  # a template's placeholders
    prose = ROLE.sub("", CODE.sub("", MATH.sub("", msgid)))
    lowered = msgid.lower()
    for english, chinese in pairs + list(PHRASES.items()):
        single = not (" " in english or "-" in english)
        if single and english.lower() in OTHER_SENSES:
            continue
        if english.split()[0].lower() not in lowered:  # quick: the pattern cannot match
            continue
        if not term_pattern(english).search(msgid if not single else prose):
            continue
        # a term written in Latin letters may change case; an acronym may stay as it is
        found = chinese.lower() in msgstr.lower() if chinese.isascii() else chinese in msgstr
        if not found and not (english.isupper() and english in msgstr):
            problems.append(f"term {english!r} is not {chinese}")
    return problems


def adaptation_problems(page: str, entries: list[polib.POEntry]) -> list[Problem]:
    """The ``ADAPTED`` messages of a catalog that are gone, ambiguous or not adapted."""
    problems = []
    for (catalog, start), required in ADAPTED.items():
        if catalog != page:
            continue
        found = [e for e in entries if not e.obsolete and e.msgid.startswith(start)]
        if len(found) != 1:
            problems.append(Problem(page, start, f"ADAPTED matches {len(found)} messages, not 1"))
        elif found[0].msgstr and required not in found[0].msgstr:
            problems.append(Problem(page, found[0].msgid, f"adapted: must contain {required}"))
    return problems


def check_catalog(page: str, pairs: list[tuple[str, str]] | None = None) -> list[Problem]:
    """Every problem of one catalog: untranslated, fuzzy, terms, lost math/code/numbers,
    adaptations lost."""
    pairs = glossary_pairs() if pairs is None else pairs
    terms = glossary_terms()
    english_cells = key_term_cells(page) if page in toc_entries() else set()
    catalog = polib.pofile(str(catalog_path(page)))
    problems = adaptation_problems(page, list(catalog))
    for entry in catalog:
        if entry.obsolete:
            continue
        if not entry.msgstr:
            problems.append(Problem(page, entry.msgid, "untranslated"))
            continue
        if "fuzzy" in entry.flags:
            problems.append(Problem(page, entry.msgid, "fuzzy: the English changed"))
        for lost in preserved(entry.msgid, entry.msgstr):
            problems.append(Problem(page, entry.msgid, f"lost {lost}"))
        if page.startswith("exercises/") and placeholders(entry.msgstr) != placeholders(
            entry.msgid
        ):
            problems.append(Problem(page, entry.msgid, "lost a {placeholder} of the template"))
        prose = not page.startswith(("code/", "exercises/"))
        if prose and " ".join(entry.msgid.split()) in english_cells and entry.msgstr != entry.msgid:
            problems.append(Problem(page, entry.msgid, "a key-terms table's English cell"))
        if prose and (is_term_cell(entry.msgid, terms) or is_chinese(entry.msgid)):
            continue  # a term cell of a key-terms table: kept in English
        for problem in term_problems(entry.msgid, entry.msgstr, pairs):
            problems.append(Problem(page, entry.msgid, problem))
    return problems


def check(catalogs: list[str] | None = None) -> list[Problem]:
    """The problems of the named catalogs (all of them by default)."""
    pairs = glossary_pairs()
    return [p for name in (catalogs or all_catalogs()) for p in check_catalog(name, pairs)]


def stats() -> dict[str, int]:
    """Messages and English words in the catalogs, and how many are translated."""
    total = {"messages": 0, "translated": 0, "words": 0, "words translated": 0}
    for page in all_catalogs():
        for entry in polib.pofile(str(catalog_path(page))):
            if entry.obsolete:
                continue
            words = len(entry.msgid.split())
            total["messages"] += 1
            total["words"] += words
            if entry.msgstr and "fuzzy" not in entry.flags:
                total["translated"] += 1
                total["words translated"] += words
    return total


# ----------------------------------------------------------------------------- generate


class Untranslatable(ValueError):
    """A message of the English source that the catalog cannot place or has no Chinese for."""


def split_table_row(line: str) -> list[tuple[int, int]]:
    """The (start, end) of each cell's text in a Markdown table row, outside code and math."""
    bounds, start, inside = [], None, None
    for i, char in enumerate(line):
        if char in "`$" and (i == 0 or line[i - 1] != "\\"):
            inside = None if inside == char else (inside or char)
        if char == "|" and inside is None and (i == 0 or line[i - 1] != "\\"):
            if start is not None:
                bounds.append((start, i))
            start = i + 1
    return bounds


def table_spans(text: str, translations: dict[str, str]) -> list[tuple[int, int, str]]:
    """Spans of table cells whose text is a message, with the Chinese for each."""
    spans, offset = [], 0
    for line in text.split("\n"):
        if line.lstrip().startswith("|") and not re.fullmatch(r"[\s|:-]+", line):
            for start, end in split_table_row(line):
                cell = line[start:end]
                key = " ".join(cell.split())
                if key in translations:
                    lead = len(cell) - len(cell.lstrip())
                    spans.append((offset + start + lead, offset + start + lead + len(key), key))
        offset += len(line) + 1
    return spans


def message_regex(msgid: str) -> re.Pattern:
    """The message as it stands in the source: the same words, any line breaks between."""
    return re.compile(r"\s+".join(re.escape(word) for word in msgid.split()))


def translate_text(
    text: str,
    located: list[tuple[str, int]],
    translations: dict[str, str],
    table_cells: frozenset[str] = frozenset(),
) -> str:
    """Replace every message of ``text`` by its translation.

    ``located`` lists (msgid, first line, 1-based) for each occurrence in this text. Table
    cells are matched whole, wherever they are: Sphinx gives them the line of an earlier
    cell, so the messages of ``table_cells`` (cells of any table of the page) are placed
    last, and only where the text is still free, or else left to their own table. The other
    messages are searched from their line on. Spans never overlap, and the translated text
    is never searched again.
    """
    spans = table_spans(text, translations)
    placed_in_tables = {key for *_, key in spans}
    table_cells = table_cells | placed_in_tables
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def free(match: re.Match) -> bool:
        return all(match.end() <= s or match.start() >= e for s, e, _ in spans)

    def inside_a_span(match: re.Match) -> bool:
        return any(s <= match.start() and match.end() <= e for s, e, _ in spans)

    table_last = sorted(located, key=lambda item: (item[0] in table_cells, item[1]))
    for msgid, line in table_last:
        if msgid in placed_in_tables:
            continue
        start = line_starts[min(max(line - 1, 0), len(line_starts) - 1)]
        pattern = message_regex(msgid)
        matches = list(pattern.finditer(text, start)) + list(pattern.finditer(text, 0))
        found = next((match for match in matches if free(match)), None)
        if found is not None:
            spans.append((found.start(), found.end(), msgid))
        elif not (msgid in table_cells or any(inside_a_span(m) for m in matches)):
            # (a message inside a larger one, such as the badge's alt text, goes with it)
            raise Untranslatable(f"cannot find {msgid[:80]!r} from line {line}")
    pieces, cursor = [], 0
    for start, end, msgid in sorted(spans):
        pieces += [text[cursor:start], translations[msgid].strip()]  # the span has no edges
        cursor = end
    return "".join(pieces) + text[cursor:]


def load_translations(page: str, normalise: bool = True) -> dict[str, str]:
    """msgid -> msgstr of one catalog (its whitespace normalised, unless ``normalise`` is
    false); raises when a message is untranslated or fuzzy."""
    catalog = polib.pofile(str(catalog_path(page)))
    missing = [e.msgid for e in catalog if not e.obsolete and (not e.msgstr or e.fuzzy)]
    if missing:
        raise Untranslatable(
            f"{page}: {len(missing)} messages untranslated or fuzzy, e.g. {missing[0][:80]!r}"
        )
    key = (lambda msgid: " ".join(msgid.split())) if normalise else (lambda msgid: msgid)
    return {key(e.msgid): e.msgstr for e in catalog if not e.obsolete}


def occurrences(template: polib.POFile) -> dict[int, list[tuple[str, int]]]:
    """Where each message stands: {cell index (0 for a Markdown page): [(msgid, line)]}."""
    where: dict[int, list[tuple[str, int]]] = {}
    for entry in template:
        key = " ".join(entry.msgid.split())
        for _, number in entry.occurrences:
            cell, line = 0, int(number)
            if line >= CELL_LINES:  # in a notebook
                cell, line = line // CELL_LINES - 1, line % CELL_LINES - 1
            where.setdefault(cell, []).append((key, line))
    return where


#: The one line of code that differs between the editions: the checkers' language.
LANGUAGE_SETTING = {"en": 'set_language("en")', LANGUAGE: f'set_language("{LANGUAGE}")'}
#: A checker's result as a notebook shows it (attnlib.exercises.ExerciseResult.render).
CHECKER_LINE = re.compile(
    r"^(?P<mark>[✓✗·]) Exercise (?P<id>\d\d\.\d+) \(.*\): (?P<status>correct|not attempted|wrong)"
)


def checker_line(line: str) -> str:
    """A checker's line of an English output, as the Chinese notebook shows it."""
    from attnlib.exercises import NOT_ATTEMPTED, REGISTRY, ExerciseResult

    match = CHECKER_LINE.match(line)
    if match is None:
        return line
    status = match["status"]
    if status == "wrong":  # (a wrong answer's hint has values that the line does not keep)
        raise Untranslatable(f"an output shows a wrong answer: {line[:80]!r}")
    hint = NOT_ATTEMPTED if status == "not attempted" else None
    result = ExerciseResult(REGISTRY[match["id"]], status, hint)
    if result.render("en") != line:
        raise Untranslatable(f"a checker's output is out of date: {line[:80]!r}")
    return result.render(LANGUAGE)


def translated_output(output: dict) -> dict:
    """An output with the checkers' lines in Chinese (everything else as it is)."""

    def lines_of(text):
        joined = "".join(text) if isinstance(text, list) else text
        chinese = "\n".join(checker_line(line) for line in joined.split("\n"))
        return chinese.splitlines(keepends=True) if isinstance(text, list) else chinese

    if output.get("output_type") == "stream":
        output["text"] = lines_of(output["text"])
    elif "text/plain" in output.get("data", {}):
        output["data"]["text/plain"] = lines_of(output["data"]["text/plain"])
    return output


def translate_code_cell(cell: dict, comments: dict[str, str], translations: dict[str, str]):
    """A code cell in Chinese: its comments, the language setting, the checkers' outputs and
    the caption of its figure; the program itself stays the same, except that the setup cell
    prints its messages in Chinese (``conventions.setup_cell``)."""
    source = "".join(cell["source"])
    if SETUP_TAG in cell["metadata"].get("tags", []):
        if source != setup_cell():
            raise Untranslatable("the setup cell is not conventions.setup_cell(): make conventions")
        source = setup_cell(LANGUAGE)
    source = translated_code(source, comments)
    source = source.replace(LANGUAGE_SETTING["en"], LANGUAGE_SETTING[LANGUAGE])
    cell["source"] = source.splitlines(keepends=True)
    cell["outputs"] = [translated_output(output) for output in cell["outputs"]]
    if LISTING_TAG in cell["metadata"].get("tags", []):
        for output in cell["outputs"]:
            if output.get("output_type") == "stream":
                text = translated_code("".join(output["text"]), comments, "listing")
                output["text"] = text.splitlines(keepends=True)
    figure = cell["metadata"].get("mystnb", {}).get("figure", {})
    if "caption" in figure:
        caption = " ".join(figure["caption"].split())
        if caption not in translations:
            raise Untranslatable(f"no translation of the caption {caption[:60]!r}")
        figure["caption"] = translations[caption]


def translated_notebook(page: str, template: polib.POFile) -> dict:
    """The Chinese notebook: the English one with every markdown cell, every comment, the
    checkers' outputs, the figures' captions and the folded cells' button labels in Chinese,
    and the checkers' language set to Chinese; the code is the same program."""
    result = json.loads(source_path(page).read_text(encoding="utf-8"))
    translations = load_translations(page)
    comments = load_translations(code_catalog(page), normalise=False)
    where = occurrences(template)
    settings = sum("".join(c["source"]).count(LANGUAGE_SETTING["en"]) for c in result["cells"])
    if settings != 1:
        raise Untranslatable(f"{page}: {settings} language settings {LANGUAGE_SETTING['en']}")
    markdown = ["".join(c["source"]) for c in result["cells"] if c["cell_type"] == "markdown"]
    table_cells = frozenset(key for text in markdown for *_, key in table_spans(text, translations))
    for index, cell in enumerate(result["cells"]):
        prompts = cell["metadata"].get("mystnb", {})
        for key, label in prompts.items():
            if isinstance(label, str):
                prompts[key] = PROMPTS.get(label, label)
        if cell["cell_type"] == "code":
            try:
                translate_code_cell(cell, comments, translations)
            except Untranslatable as error:
                raise Untranslatable(f"{page}, cell {index}: {error}") from None
            continue
        text = "".join(cell["source"])
        try:
            text = translate_text(text, where.get(index, []), translations, table_cells)
        except Untranslatable as error:
            raise Untranslatable(f"{page}, cell {index}: {error}") from None
        cell["source"] = text.splitlines(keepends=True)
    return result


def toc_captions() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    return [part["caption"] for part in toc.get("parts", []) if "caption" in part]


def translated_page(page: str, template: polib.POFile) -> str:
    """The Chinese Markdown page (the root page's catalog also holds the toc's captions)."""
    text = source_path(page).read_text(encoding="utf-8")
    captions = set(toc_captions())
    located = [(m, line) for m, line in occurrences(template).get(0, []) if m not in captions]
    try:
        text = translate_text(text, located, load_translations(page))
    except Untranslatable as error:
        raise Untranslatable(f"{page}: {error}") from None
    if not comment_messages(page):
        return text
    comments = load_translations(code_catalog(page), normalise=False)
    return CODE_BLOCK.sub(
        lambda block: block[0].replace(block[3], translated_code(block[3], comments, block[2])),
        text,
    )


def zh_config() -> str:
    """``zh/_config.yml``: the English configuration, in Chinese, with paths from ``zh/``."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    config["title"] = PHRASES[config["title"]]  # the book's title, as every page writes it
    config["exclude_patterns"] = ["_build", "**.ipynb_checkpoints"]
    config["repository"]["path_to_book"] = "zh"
    config["bibtex_bibfiles"] = ["../book/references.bib"]
    sphinx = config["sphinx"]
    sphinx["local_extensions"] = {name: "../book/_ext" for name in sphinx["local_extensions"]}
    sphinx["config"]["language"] = LANGUAGE
    sphinx["config"]["html_static_path"] = ["../book/_static"]
    sphinx["config"]["html_search_language"] = "zh"
    sphinx["config"].pop("locale_dirs", None)
    sphinx["config"].pop("gettext_compact", None)
    sphinx["config"]["language_switch"] = {"label": "English", "lang": "en", "root": ".."}
    text = yaml.safe_dump(config, allow_unicode=True, sort_keys=False)
    return GENERATED.format("_config.yml") + text


def zh_toc() -> str:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    captions = load_translations(toc["root"])  # the root page's catalog holds the captions
    for part in toc.get("parts", []):
        part["caption"] = captions[part["caption"]]
    return GENERATED.format("_toc.yml") + yaml.safe_dump(toc, allow_unicode=True, sort_keys=False)


def generated_files(templates: Path | None = None) -> dict[Path, str]:
    """Every file of ``zh/`` as ``generate`` writes it, from the current English sources."""
    templates = build_templates() if templates is None else templates
    files = {ZH / "_config.yml": zh_config(), ZH / "_toc.yml": zh_toc()}
    for page in toc_entries():
        template = polib.pofile(str(templates / f"{page}.pot"))
        if source_path(page).suffix == ".ipynb":
            notebook = translated_notebook(page, template)
            text = json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"
            files[ZH / f"{page}.ipynb"] = text
        else:
            files[ZH / f"{page}.md"] = translated_page(page, template)
    return files


def write_package_catalog() -> bool:
    """Compile the checkers' catalogs into the package; True when the file changed."""
    from attnlib import exercises

    compiled = compiled_catalog()
    PACKAGE_CATALOG.parent.mkdir(parents=True, exist_ok=True)
    before = PACKAGE_CATALOG.read_bytes() if PACKAGE_CATALOG.is_file() else b""
    compiled.save(str(PACKAGE_CATALOG))
    exercises._catalog.cache_clear()  # render with the catalog just written
    return PACKAGE_CATALOG.read_bytes() != before


def generate() -> list[Path]:
    """Write the package's compiled catalog and ``zh/``; return the files that changed."""
    changed = [PACKAGE_CATALOG] if write_package_catalog() else []
    for path, text in generated_files().items():
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    return changed


def fill(page: str, translations: dict[str, str]) -> None:
    """Write translations into one catalog (clearing their fuzzy flag); unknown msgids raise."""
    catalog = polib.pofile(str(catalog_path(page)), wrapwidth=0)
    entries = {e.msgid: e for e in catalog if not e.obsolete}
    unknown = [msgid for msgid in translations if msgid not in entries]
    if unknown:
        raise KeyError(f"{page}: not in the catalog: {unknown[:3]}")
    for msgid, msgstr in translations.items():
        if msgstr:
            entries[msgid].msgstr = msgstr
            if "fuzzy" in entries[msgid].flags:
                entries[msgid].flags.remove("fuzzy")
    catalog.save(str(catalog_path(page)))


def print_code(page: str) -> None:
    """A lesson's code cells as the Chinese notebook will have them (English comments where
    the catalog has no translation yet); fails if a translated cell is another program."""
    catalog = polib.pofile(str(catalog_path(code_catalog(page))))
    comments = {e.msgid: e.msgstr or e.msgid for e in catalog}
    notebook = json.loads(source_path(page).read_text(encoding="utf-8"))
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] == "code":
            english = "".join(cell["source"])
            chinese = translated_code(english, comments)
            if program_tree(chinese) != program_tree(english):
                raise Untranslatable(f"cell {index}: the program changed")
            print(f"# ---- cell {index}\n{chinese}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("extract", help="English changed: update the catalogs")
    check_parser = commands.add_parser("check", help="untranslated, fuzzy or inconsistent")
    check_parser.add_argument("pages", nargs="*", help="pages (default: all), e.g. lessons/01_x")
    commands.add_parser("generate", help="write zh/ from the English sources and catalogs")
    commands.add_parser("stats", help="messages and words translated")
    todo_parser = commands.add_parser("todo", help="a page's untranslated messages, as JSON")
    todo_parser.add_argument("page")
    fill_parser = commands.add_parser("fill", help="fill a page's catalog from JSON")
    fill_parser.add_argument("page")
    fill_parser.add_argument("json_file", type=Path, help="a JSON object {msgid: msgstr}")
    code_parser = commands.add_parser("code", help="a lesson's code cells, in Chinese")
    code_parser.add_argument("page")
    args = parser.parse_args(argv)
    command = args.command or "check"
    if command == "extract":
        extract()
        print(stats())
    elif command == "check":
        pages = [p.removesuffix(".po") for p in getattr(args, "pages", [])] or None
        problems = check(pages)
        for problem in problems:
            print(problem)
        print(f"{len(problems)} problems")
        return 1 if problems else 0
    elif command == "generate":
        for path in generate():
            print("wrote", path.relative_to(ROOT))
    elif command == "todo":
        catalog = polib.pofile(str(catalog_path(args.page)))
        todo = {e.msgid: "" for e in catalog if not e.obsolete and (not e.msgstr or e.fuzzy)}
        print(json.dumps(todo, ensure_ascii=False, indent=1))
    elif command == "fill":
        fill(args.page, json.loads(args.json_file.read_text(encoding="utf-8")))
    elif command == "code":
        print_code(args.page)
    elif command == "stats":
        print(stats())
    return 0


if __name__ == "__main__":
    sys.exit(main())
