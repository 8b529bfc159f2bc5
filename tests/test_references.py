"""References that cannot go stale or go missing.

- Another lesson is referred to by ``{lesson}`topic``` (``book/_ext/lesson_links.py``), which
  the build turns into the lesson's current number and a link; a number typed by hand
  ("lesson 07", "第 07 课", a link whose text is "07") is refused in the lessons' prose, figure
  captions and code, in the book's pages and in the Chinese catalogs. An exercise named in the
  prose ("exercise 05.3") must exist.
- A work named by its authors ("Su et al.", "Shaw et al., 2018") is cited with ``{cite}`` in the
  same cell, the first lesson that names a well-known work (T5, ALiBi, ResNet, …) cites it, and
  every entry of ``book/references.bib`` is cited somewhere.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import nbformat
import polib
import pytest

from attnlib.exercises import REGISTRY

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted((ROOT / "lessons").glob("[0-9][0-9]_*.ipynb"))
PAGES = sorted((ROOT / "book").glob("*.md"))
CATALOGS = sorted(
    path
    for folder in ("lessons", "book", "code")
    for path in (ROOT / "locale" / "zh_CN" / "LC_MESSAGES" / folder).rglob("*.po")
)

# A lesson number typed by hand: "lesson 07", "lessons 02 to 04", "Lessons 11–15", a list that
# goes on from a {lesson} role ("{lesson}`a`, 07 and 09"), "第 07 课", "第 03–07 课", a link or
# a {doc} whose text is a lesson number.
_NUMBER_AFTER_ROLE = r"\{lesson\}`[^`]*`(?:\s*(?:,|and|or|to|–|-|、|至|到|和)\s*)+\d\d\b"
HAND_TYPED = re.compile(
    "|".join(
        [
            r"\b[Ll]essons?\s+\d\d\b",
            _NUMBER_AFTER_ROLE,
            r"第\s*\d\d(?!\d)[^课。，；\n]{0,40}课",
            r"\[[^\]]*\b\d\d\b[^\]]*\]\([^)]*\d\d_[a-z_]+(?:\.ipynb)?\)",
            r"\{doc\}`\d\d\b[^`]*`",
        ]
    )
)
LESSON_ROLE = re.compile(r"\{lesson\}`([^`]*)`")
EXERCISE = re.compile(r"(?:[Ee]xercises?|练习)\s*(\d\d\.\d)\b")


def markdown_cells(path: Path) -> list[str]:
    """The prose of a lesson: its markdown cells and its figure captions."""
    texts = []
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "markdown":
            texts.append(cell.source)
        caption = cell.get("metadata", {}).get("mystnb", {}).get("figure", {}).get("caption")
        if caption:
            texts.append(caption)
    return texts


def code_cells(path: Path) -> list[str]:
    return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def prose_units() -> list[tuple[str, str]]:
    """(where, text) for every piece of English prose: lesson cells and captions, and the
    paragraphs of the book's pages."""
    units = []
    for path in LESSONS:
        units += [(f"{path.stem} cell", text) for text in markdown_cells(path)]
    for page in PAGES:
        paragraphs = page.read_text(encoding="utf-8").split("\n\n")
        units += [(f"book/{page.name}", text) for text in paragraphs]
    return units


def hand_typed(text: str) -> list[str]:
    """The hand-typed lesson numbers in ``text`` (code spans aside: `lessons/NN_*.ipynb`)."""
    text = re.sub(r"(?<![}`])`[^`]*lessons/[^`]*`", "", text)
    return [match.group() for match in HAND_TYPED.finditer(text)]


def test_the_hand_typed_pattern_refuses_numbers_and_accepts_roles():
    refused = [
        "see lesson 07",
        "Lessons 02 to 05 built",
        "lessons {lesson}`a` and 07",
        "第 07 课",
        "第 {lesson}`a`–09 课",
        "第 03–07 课和",
        "[lesson 02](02_from_attention_to_self_attention.ipynb)",
        "[05](../lessons/05_positional_encoding.ipynb)",
        "{doc}`01 <../lessons/01_sequences_of_vectors>`",
    ]
    accepted = [
        "see lesson {lesson}`sequence_to_sequence`",
        "lessons {lesson}`a` to {lesson}`b`",
        "第 {lesson}`a`–{lesson}`b` 课",
        "exercise 05.3",
        "run `pytest --nbval lessons/03_queries_keys_values.ipynb`",
        "the 12 lessons",
        "第 129 个词元，第 12 个",
    ]
    assert all(hand_typed(text) for text in refused), [t for t in refused if not hand_typed(t)]
    assert not any(hand_typed(text) for text in accepted), [t for t in accepted if hand_typed(t)]


def lesson_column_numbers(text: str) -> list[str]:
    """The bare numbers in a Markdown table's column headed "lesson" or "lessons"."""
    found, column = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            column = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if column is None:
            headed = [i for i, cell in enumerate(cells) if cell.lower() in ("lesson", "lessons")]
            column = headed[0] if headed else -1
        elif 0 <= column < len(cells) and not set(cells[column]) <= set("-: "):
            found += re.findall(r"\b\d\d\b", LESSON_ROLE.sub("", cells[column]))
    return found


def test_a_lesson_column_with_a_typed_number_is_refused():
    table = (
        "| model | lesson |\n|---|---|\n| CNN | 10 |\n| GRU | {lesson}`self_attention_and_rnns` |"
    )
    assert lesson_column_numbers(table) == ["10"]


def test_no_lesson_number_is_typed_by_hand():
    found = [(where, hit) for where, text in prose_units() for hit in hand_typed(text)]
    found += [(where, n) for where, text in prose_units() for n in lesson_column_numbers(text)]
    for path in LESSONS:
        found += [
            (f"{path.stem} code", hit) for code in code_cells(path) for hit in hand_typed(code)
        ]
    for path in CATALOGS:
        for entry in polib.pofile(str(path)):
            if entry.obsolete:
                continue
            found += [(path.name, hit) for hit in hand_typed(entry.msgstr)]
    assert not found, (
        "refer to a lesson with {lesson}`topic` (its file name without the number), not by a "
        f"number typed by hand: {found}"
    )


def test_every_lesson_role_names_a_lesson():
    topics = {path.stem[3:] for path in LESSONS}
    named = {topic for _, text in prose_units() for topic in LESSON_ROLE.findall(text)}
    assert named and named <= topics, sorted(named - topics)


def test_every_exercise_named_in_the_prose_exists():
    named = {number for _, text in prose_units() for number in EXERCISE.findall(text)}
    assert named and named <= set(REGISTRY), sorted(named - set(REGISTRY))


# --------------------------------------------------------------------------- citations

CITE = re.compile(r"\{cite(?::[tp])?\}`([^`]*)`")
# "Su et al.", "Shaw et al., 2018", "Zhu and Lafferty (2003)": a work named by its authors
AUTHORS = re.compile(
    r"\b([A-Z][^\W\d_]+)(?: et al\b| (?:and|&) [A-Z][^\W\d_]+,? \(?(?:19|20)\d\d\b"
    r"|,? \((?:19|20)\d\d\))"
)
MONTHS = {
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
}  # fmt: skip

#: Works the book names without their authors, and the entry the first lesson that names one
#: cites (a later lesson may name it again without citing).
NAMED_WORKS = {
    r"\bT5\b": "raffel2020exploring",
    r"\bALiBi\b": "press2022train",
    r"\bRoPE\b": "su2024roformer",
    r"\bGPT-2\b": "radford2019language",
    r"\bResNets?\b": "he2016deep",
    r"\b[Ll]ayer normali[sz]ation\b": "ba2016layer",
    r"\b[Dd]ropout\b": "srivastava2014dropout",
    r"\bGQA\b|\bgrouped-query attention\b": "ainslie2023gqa",
    r"\bMQA\b|\bmulti-query attention\b": "shazeer2019fast",
    r"\bMLA\b|\bmulti-head latent attention\b": "deepseekai2024deepseekv2",
    r"\bStreamingLLM\b|\battention sinks?\b": "xiao2024efficient",
    r"\bFlash-Decoding\b": "dao2023flashdecoding",
    r"\bSparse Transformer\b": "child2019generating",
    r"\bGCN\b|\bgraph convolutional network": "kipf2017semi",
    r"\bstochastic block model\b": "holland1983stochastic",
    r"\bBERT\b": "devlin2019bert",
    r"\bViT\b|\bVision Transformer\b": "dosovitskiy2021image",
    r"\bLongformer\b": "beltagy2020longformer",
    r"\bLinformer\b": "wang2020linformer",
    r"\bPerformer\b": "choromanski2021rethinking",
    r"\bReformer\b": "kitaev2020reformer",
    r"\bBigBird\b": "zaheer2020big",
    r"\bGATv2\b": "brody2022attentive",
    r"\bGraphormer\b": "ying2021transformers",
    r"\bGRU\b": "cho2014learning",
    r"\bLSTM\b": "hochreiter1997long",
    r"\bFlashAttention-2\b": "dao2023flashattention2",
    r"\bFlashAttention-3\b": "shah2024flashattention3",
    r"\bDeiT\b": "touvron2021training",
    r"\bConformer\b": "gulati2020conformer",
    r"\bLong Range Arena\b": "tay2021long",
    r"\b[Rr]ing [Aa]ttention\b": "liu2023ring",
    r"\bUlysses\b": "jacobs2023ulysses",
}


def folded(name: str) -> str:
    """``Veličković`` → ``velickovic``: a surname as the start of a citation key."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    return ascii_name.lower()


def cited_keys(text: str) -> set[str]:
    return {key.strip() for keys in CITE.findall(text) for key in keys.split(",")}


def test_a_work_named_by_its_authors_is_cited_in_the_same_cell():
    uncited = []
    for where, text in prose_units():
        keys = cited_keys(text)
        for match in AUTHORS.finditer(re.sub(r"`[^`]*`", "", text)):
            name = match.group(1)
            if name in MONTHS:
                continue
            if not any(key.startswith(folded(name)) for key in keys):
                uncited.append(f"{where}: {match.group()!r}")
    assert not uncited, f"cite these with {{cite}}`key` (or {{cite:t}}) in the same cell: {uncited}"


@pytest.mark.parametrize("pattern, key", NAMED_WORKS.items(), ids=list(NAMED_WORKS.values()))
def test_the_first_lesson_that_names_a_work_cites_it(pattern, key):
    for path in LESSONS:
        texts = markdown_cells(path)
        prose = "\n".join(re.sub(r"`[^`]*`", "", text) for text in texts)
        if re.search(pattern, prose):
            assert key in cited_keys("\n".join(texts)), f"{path.stem} names {pattern}: cite {key}"
            return
    pytest.fail(f"no lesson names {pattern}: remove it from NAMED_WORKS or mend the pattern")


def test_every_bibliography_entry_is_cited():
    bib = (ROOT / "book" / "references.bib").read_text(encoding="utf-8")
    entries = set(re.findall(r"^@\w+\{([^,]+),", bib, flags=re.MULTILINE))
    cited = set().union(*(cited_keys(text) for _, text in prose_units()))
    assert not entries - cited, f"never cited: {sorted(entries - cited)}"
    assert not cited - entries, f"cited but not in references.bib: {sorted(cited - entries)}"


def test_the_readmes_links_to_the_repository_exist():
    """README.md is read on the repository's front page, not built: its links to lessons and
    pages name files, which must exist (a renumbering renames them)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\((?!https?://|#)([^)]+)\)", readme)
    assert targets and not [t for t in targets if not (ROOT / t).exists()], targets
