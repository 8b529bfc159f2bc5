"""Every lesson has the anatomy of a lesson: a title with its Colab badge and goals, a silent
setup cell, stored and clean outputs, 3 to 5 exercises with checkers and hidden solutions (one
of which changes an experiment), progress bars on training loops, asserted claims, a summary
and a key-terms table with the Chinese terms, all in the glossary. These tests read the
notebooks without running them; ``tests/test_lessons.py`` runs them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

import conventions
import run_notebooks
from attnlib.exercises import REGISTRY

ROOT = Path(__file__).resolve().parent.parent


LESSONS = sorted((ROOT / "lessons").glob("*.ipynb"))
CJK = re.compile(r"[\u4e00-\u9fff]")


def source(cell) -> str:
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


def tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def text_outputs(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            parts.append(out["text"])
        elif "data" in out and "text/plain" in out["data"]:
            parts.append("".join(out["data"]["text/plain"]))
    return "".join(parts)


def test_there_are_lessons():
    assert len(LESSONS) >= 2


def test_every_lesson_is_in_the_toc_and_every_toc_lesson_exists():
    listed = {f for f in conventions.toc_entries() if f.startswith("lessons/")}
    on_disk = {f"lessons/{p.stem}" for p in LESSONS}
    assert listed == on_disk


@pytest.fixture(params=LESSONS, ids=[p.stem for p in LESSONS])
def lesson(request):
    path = request.param
    return path, nbformat.read(path, as_version=4)


def test_size_under_2_mb(lesson):
    path, _ = lesson
    assert path.stat().st_size < 2_000_000


def test_one_sitting(lesson):
    """A lesson is read in one sitting: at most ``MAX_PROSE_WORDS`` words of prose."""
    path, nb = lesson
    words = conventions.prose_words(nb)
    assert words <= conventions.MAX_PROSE_WORDS, (
        f"{path.name}: {words} words of prose; move a side topic into a short "
        f"'Going further' section or another lesson (at most {conventions.MAX_PROSE_WORDS})"
    )


def test_title_badge_and_goals(lesson):
    path, nb = lesson
    number = path.stem[:2]
    first = nb.cells[0]
    assert first.cell_type == "markdown"
    text = source(first)
    assert re.match(rf"# {number} · \S", text), "the first cell starts with '# NN · Title'"
    assert conventions.colab_badge(f"lessons/{path.name}") in text
    assert "What you will learn" in text
    assert "Source documents" in text


def test_setup_cell_installs_on_colab_only_and_is_silent(lesson):
    _, nb = lesson
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert conventions.SETUP_TAG in tags(first_code)
    assert source(first_code) == conventions.setup_cell()
    assert first_code.outputs == []


def test_outputs_are_stored_and_clean(lesson):
    _, nb = lesson
    code = [c for c in nb.cells if c.cell_type == "code" and source(c).strip()]
    counts = [c.execution_count for c in code]
    assert None not in counts, "every code cell has been executed (run `make notebooks`)"
    assert counts == list(range(1, len(code) + 1)), "executed top to bottom in one run"
    assert sum(bool(c.outputs) for c in code) >= len(code) // 3
    for cell in code:
        for out in cell.outputs:
            assert out["output_type"] != "error", source(cell)[:200]
            assert "application/vnd.jupyter.widget-view+json" not in out.get("data", {})
            assert not re.search(r"\d+it/s\]|s/it\]", str(out)), "a progress bar was saved"
            assert not (out["output_type"] == "stream" and out["name"] == "stderr"), out["text"]
    assert nb.metadata["kernelspec"]["name"] == "python3"


def test_every_figure_has_a_caption(lesson):
    """A figure's labels stay English in the Chinese edition: its caption (cell metadata
    ``mystnb.figure.caption``, translated) is what says, in the reader's language, what it shows."""
    _, nb = lesson
    for cell in nb.cells:
        images = [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
        caption = cell.metadata.get("mystnb", {}).get("figure", {}).get("caption", "")
        assert not images or caption.strip(), f"a figure without a caption: {source(cell)[:200]}"


def test_exercises_have_checkers_and_hidden_solutions(lesson):
    path, nb = lesson
    number = path.stem[:2]
    cells = nb.cells
    exercise_ids, learner_names, solutions = [], set(), []
    for i, cell in enumerate(cells):
        if conventions.EXERCISE_TAG not in tags(cell):
            continue
        found = re.findall(r'^check\("(\d\d\.\d+)", \w+\)$', source(cell), flags=re.M)
        assert len(found) == 1, f"an exercise cell ends with check(...): {source(cell)[:200]}"
        exercise_id = found[0]
        assert exercise_id.startswith(f"{number}.") and exercise_id in REGISTRY
        assert "not attempted" in text_outputs(cell), "the stored exercise output is unattempted"
        solution = cells[i + 1]
        assert conventions.SOLUTION_TAG in tags(solution) and "hide-cell" in tags(solution)
        assert solution.metadata.get("mystnb") == conventions.SOLUTION_METADATA
        assert source(solution).startswith(f"# @title Solution {exercise_id} ")
        assert f'assert check("{exercise_id}", solution_' in source(solution)
        assert solution.outputs == [], "a solution prints nothing: its answers stay hidden"
        # "Run all" runs the solutions too: they must leave the learner's names alone
        bound = bound_names(source(solution))
        assert not bound & bound_names(source(cell), imports=True), bound
        assert all(name.startswith("solution_") for name in bound), bound
        learner_names.add(found_name(source(cell)))
        solutions.append(source(solution))
        exercise_ids.append(exercise_id)
    assert 3 <= len(exercise_ids) <= 5
    # ... nor rely on them (after "Run all", a learner's function is the learner's attempt)
    for code in solutions:
        used = {n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name)}
        assert not used & learner_names, f"a solution calls the learner's {used & learner_names}"
    assert len(set(exercise_ids)) == len(exercise_ids)
    assert {e for e in REGISTRY if e.startswith(f"{number}.")} == set(exercise_ids)
    assert sum(conventions.SOLUTION_TAG in tags(c) for c in cells) == len(exercise_ids)


def test_one_exercise_changes_an_experiment(lesson):
    """Each lesson has an exercise that changes one of its experiments and reads the result."""
    _, nb = lesson
    titles = re.findall(r"^### Exercise \d\d\.\d+ · (.*)$", "\n".join(map(source, nb.cells)), re.M)
    assert sum(t.startswith("Change the experiment: ") for t in titles) == 1, titles


def test_every_training_loop_shows_progress(lesson):
    """A cell that trains (calls .backward()) wraps its loop in attnlib.progress.progress."""
    _, nb = lesson
    for cell in nb.cells:
        if cell.cell_type != "code" or conventions.SOLUTION_TAG in tags(cell):
            continue
        if ".backward()" in source(cell):
            assert "progress(" in source(cell), source(cell)[:300]


def found_name(code: str) -> str:
    """The name an exercise cell hands to check(...)."""
    return re.findall(r'^check\("\d\d\.\d+", (\w+)\)$', code, flags=re.M)[0]


def bound_names(code: str, imports: bool = False) -> set[str]:
    """Names that ``code`` binds at the top level (imports only if ``imports``)."""
    names = set()
    for node in ast.parse(code).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif imports and isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def test_summary_and_key_terms_with_chinese(lesson):
    _, nb = lesson
    markdown = [source(c) for c in nb.cells if c.cell_type == "markdown"]
    assert any(m.startswith("## Summary") for m in markdown)
    terms = [m for m in markdown if m.startswith("## Key terms")]
    assert len(terms) == 1
    rows = [line for line in terms[0].splitlines() if line.startswith("|")][2:]
    assert len(rows) >= 8
    assert all(CJK.search(row) for row in rows), "every key term has its Chinese name"


def test_prose_claims_are_asserted(lesson):
    _, nb = lesson
    asserting = [
        c
        for c in nb.cells
        if c.cell_type == "code"
        and "assert " in source(c)
        and conventions.SOLUTION_TAG not in tags(c)
    ]
    assert len(asserting) >= 5


def test_timings_are_taken_in_rounds_and_printed_with_their_spread(lesson):
    """A cell that times code takes interleaved rounds (``bench.timed_rounds``) and prints each
    time or ratio as median [min–max] (``bench.spread``); the only clock read directly is a
    training run's own duration, printed once and never compared."""
    _, nb = lesson
    for index, cell in enumerate(nb.cells):
        code = source(cell) if cell.cell_type == "code" else ""
        if "timed_rounds(" in code:
            assert "spread(" in code, f"cell {index} times rounds but prints no spread"
        for clock in ("timeit", "time.time()", "seconds_of("):
            assert clock not in code, f"cell {index} reads {clock}: use bench.timed_rounds"
        if "perf_counter()" in code:
            assert "trained in" in code, f"cell {index} times with perf_counter: use timed_rounds"


def normalised_terms(english: str) -> set[str]:
    """ "causal mask / sequence mask (x)" → {"causal mask / sequence mask", "causal mask", ...}."""
    plain = re.sub(r"\(.*?\)", "", english.replace("`", "")).lower()
    parts = [plain, *plain.split("/")]
    return {" ".join(part.split()) for part in parts if part.strip()}


def markdown_table_rows(text: str) -> list[list[str]]:
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def test_every_key_term_is_in_the_glossary_with_a_lesson_link():
    glossary = (ROOT / "book" / "glossary.md").read_text(encoding="utf-8")
    rows = markdown_table_rows(glossary)
    known = set().union(*(normalised_terms(row[0]) for row in rows))
    for row in rows:
        assert CJK.search(row[1]), row
        link = re.fullmatch(r"\{lesson\}`(\w+)`", row[3])
        assert link and len(list((ROOT / "lessons").glob(f"??_{link.group(1)}.ipynb"))) == 1, row
    missing = []
    for path in LESSONS:
        nb = nbformat.read(path, as_version=4)
        terms = next(source(c) for c in nb.cells if source(c).startswith("## Key terms"))
        for row in markdown_table_rows(terms):
            if not normalised_terms(row[0]) & known:
                missing.append(f"{path.stem[:2]}: {row[0]}")
    assert not missing, f"key terms missing from book/glossary.md: {missing}"


def test_the_file_is_what_make_notebooks_writes(lesson, tmp_path):
    path, nb = lesson
    run_notebooks.write(nb, tmp_path / path.name)
    assert (tmp_path / path.name).read_bytes() == path.read_bytes(), "run `make notebooks`"


def test_regeneration_check_compares_all_but_machine_dependent_cells(lesson):
    path, committed = lesson
    fresh = nbformat.read(path, as_version=4)
    assert run_notebooks.differences(committed, fresh) == []
    code = [c for c in fresh.cells if c.cell_type == "code" and c.outputs]
    for cell in code:
        output = cell.outputs[0]
        if "text" in output:
            output["text"] = "changed"
        else:
            output["data"] = {"text/plain": "changed"}
    ignored = sum(conventions.IGNORE_OUTPUT_TAG in tags(c) for c in code)
    assert len(run_notebooks.differences(committed, fresh)) == len(code) - ignored
