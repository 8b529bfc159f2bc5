"""The offline bundle (``make bundle``, ``tools/bundle.py``) and the setup page's section for
learners who cannot reach Colab or GitHub (``book/setup.md``, "Without Colab or GitHub").

The bundle is built from the book that this test run builds anyway (the session's
``book_html``, which ``tests/test_book.py`` and ``tests/test_browser.py`` check), so these tests
run in the same process as those (``conftest.scope_of``) and cost no second build: building the
HTML here would take longer than everything else in this file.

It is unpacked into an empty folder, and the commands of the setup page's section and of the
bundle's README are run there, as written, in order: a new virtual environment, the install
from the bundle's wheel and lock, and a lesson of each edition run from the unpacked notebooks.
As in ``tests/test_fresh_learner.py``, PyTorch is linked in from the book's environment
instead of installed (it stands for the gigabyte a learner downloads once), and a ``git`` that
fails is first on the PATH: nothing may come from the book's repository. The commands the page
marks ``# needs a network`` are not run (this machine has none); the Windows commands are
checked against the POSIX ones they write out, and against the ``Makefile``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
import zipfile
from pathlib import Path

import bundle
import nbformat
import pytest
from test_fresh_learner import link_preinstalled

from conventions import SETUP_MESSAGES

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow

SECTION = re.compile(r"^## Without Colab or GitHub\n(.*?)(?=^## )", re.M | re.S)
BLOCK = re.compile(r"^```(bash|bat|python)\n(.*?)^```$", re.M | re.S)
NETWORK = "# needs a network"
WHEEL_PLACEHOLDER = "/path/to/"


def offline_section() -> str:
    """The setup page's section for learners without Colab or GitHub."""
    return SECTION.search((ROOT / "book" / "setup.md").read_text(encoding="utf-8"))[1]


def blocks(markdown: str, language: str) -> list[str]:
    """The fenced code blocks of one language in a Markdown text, in order."""
    return [code for lang, code in BLOCK.findall(markdown) if lang == language]


def commands(markdown: str, language: str = "bash") -> list[str]:
    """Every command line of a text's blocks of one language."""
    return [line for code in blocks(markdown, language) for line in code.splitlines() if line]


def as_posix(command: str) -> str:
    """A Windows command of the page as it reads on Linux and macOS."""
    command = command.replace(".venv\\Scripts\\", ".venv/bin/").replace("\\", "/")
    return re.sub(r"^py -m ", "python3 -m ", command)


@pytest.fixture(scope="module")
def bundle_zip(book_html, tmp_path_factory) -> Path:
    """The bundle, built from this test run's book; it is timed and its size printed."""
    start = time.perf_counter()
    out = bundle.build_bundle(book_html, tmp_path_factory.mktemp("bundle") / "bundle.zip")
    seconds, size = time.perf_counter() - start, out.stat().st_size / 2**20
    print(f"bundle: {size:.0f} MiB in {seconds:.1f} s")
    return out


def test_the_bundle_holds_both_editions_the_wheel_and_the_lock(bundle_zip, book_html):
    with zipfile.ZipFile(bundle_zip) as archive:
        names = set(archive.namelist())
        folder = bundle.FOLDER
        (wheel,) = [n for n in names if re.fullmatch(rf"{folder}/wheels/attnlib-.*\.whl", n)]
        assert (
            archive.read(f"{folder}/requirements.txt") == (ROOT / "requirements.txt").read_bytes()
        )
        for edition in ("lessons", "zh/lessons"):
            for notebook in (ROOT / edition).glob("*.ipynb"):
                assert archive.read(f"{folder}/{edition}/{notebook.name}") == notebook.read_bytes()
        for page in ("index.html", "zh/index.html", "_static/mathjax/tex-chtml.js"):
            assert f"{folder}/html/{page}" in names, page
        for page in ("book/setup.html", "zh/book/setup.html"):
            assert archive.read(f"{folder}/html/{page}") == (book_html / page).read_bytes()
        readme = archive.read(f"{folder}/README.md").decode()
        with zipfile.ZipFile(archive.open(wheel)) as wheel_file:
            assert "attnlib/locale/zh_CN/LC_MESSAGES/attnlib.mo" in wheel_file.namelist()
    # The README and the setup page name the wheel that the bundle holds.
    name = Path(wheel).name
    assert name in readme and name in offline_section(), name
    assert "离线包" in readme and "offline bundle" in readme


def learner_env(tmp_path: Path) -> dict[str, str]:
    """The environment of the learner's shell: no PYTHONPATH, no active environment, and a
    ``git`` first on the PATH that fails and leaves a note that it was called."""
    fake = tmp_path / "no-git"
    fake.mkdir()
    (fake / "git").write_text(f'#!/bin/sh\necho "git $*" >> {fake}/called\nexit 1\n')
    (fake / "git").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{fake}{os.pathsep}{env['PATH']}"
    return env


def shell(command: str, cwd: Path, env: dict[str, str]) -> str:
    """Run one command of the page as a learner's shell would; return what it printed."""
    proc = subprocess.run(
        command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"{command}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def run_commands(lines: list[str], cwd: Path, env: dict[str, str], done: set[str]) -> Path:
    """Run a page's command lines in order, each once (``cd`` moves on); return the folder
    they end in. Right after the environment is made, PyTorch is linked into it."""
    for line in lines:
        if NETWORK in line or line in done:
            continue
        done.add(line)
        if line.startswith("cd "):
            cwd = cwd / shlex.split(line)[1]
            continue
        shell(line, cwd, env)
        if line.endswith("-m venv .venv"):
            link_preinstalled(cwd / ".venv" / "bin" / "python", cwd / ".venv" / "preinstalled")
        if " config --site set " in line:  # the mirror's address stands for the reader's own
            key, value = shlex.split(line)[-2:]
            assert shell(f".venv/bin/pip config --site get {key}", cwd, env).strip() == value
            shell(f".venv/bin/pip config --site unset {key}", cwd, env)  # this machine's index
    return cwd


def executed_lessons(lines: list[str]) -> list[str]:
    return [shlex.split(line)[-1] for line in lines if " execute " in line]


def test_the_pages_commands_run_in_the_unpacked_bundle(bundle_zip, tmp_path):
    """The setup page's commands, then the README's, in an empty folder with the zip."""
    shutil.copy(bundle_zip, tmp_path / "self-attention-book-offline.zip")
    env, done = learner_env(tmp_path), set()
    page = commands(offline_section())
    assert any(line.startswith("python3 -m zipfile -e") for line in page)
    folder = run_commands(page, tmp_path, env, done)
    assert folder == tmp_path / bundle.FOLDER
    readme = commands((folder / "README.md").read_text(encoding="utf-8"))
    run_commands(readme, folder, env, done)
    lessons = executed_lessons(page + readme)
    assert set(lessons) == {
        "zh/lessons/01_sequences_of_vectors.ipynb",
        "lessons/01_sequences_of_vectors.ipynb",
    }
    for lesson in lessons:  # run from the unpacked notebook, every cell, outputs saved in it
        code = [
            c for c in nbformat.read(folder / lesson, as_version=4).cells if c.cell_type == "code"
        ]
        assert all("execution" in c.metadata for c in code), f"{lesson} was not run"
        assert not any(o.output_type == "error" for c in code for o in c.outputs), lesson
    chinese = nbformat.read(folder / lessons[0], as_version=4)
    shown = [
        o.get("data", {}).get("text/plain", "") for c in chinese.cells for o in c.get("outputs", [])
    ]
    assert any("：尚未作答。" in text for text in shown), "the checkers answer in Chinese"
    assert not (tmp_path / "no-git" / "called").exists(), "something called git"
    # The environment holds attnlib from the bundle's wheel, not from this checkout.
    python = folder / ".venv" / "bin" / "python"
    where = shell(f"{python} -c 'import attnlib; print(attnlib.__file__)'", folder, env)
    assert where.startswith(str(folder / ".venv" / "lib")), where
    platform_setup_cell_installs_from_the_wheel(folder, env)


def platform_setup_cell_installs_from_the_wheel(folder: Path, env: dict[str, str]) -> None:
    """On a hosted Jupyter platform: the page's cell, with the uploaded wheel's path, then a
    lesson's setup cell, in a kernel of the environment made above."""
    (snippet,) = blocks(offline_section(), "python")
    assert WHEEL_PLACEHOLDER in snippet
    snippet = snippet.replace(WHEEL_PLACEHOLDER, f"{folder / 'wheels'}/")
    lesson = nbformat.read(folder / "zh/lessons/01_sequences_of_vectors.ipynb", as_version=4)
    setup = next(c for c in lesson.cells if c.cell_type == "code")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(snippet), setup])
    nb.metadata = lesson.metadata
    nbformat.write(nb, folder / "platform.ipynb")
    shell(".venv/bin/jupyter execute --inplace platform.ipynb", folder, env)
    nb = nbformat.read(folder / "platform.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for o in nb.cells[1].outputs)
    wheel = next((folder / "wheels").glob("attnlib-*.whl"))
    assert SETUP_MESSAGES["zh_CN"]["installed"].format(source=wheel) in printed, printed


def test_the_windows_commands_are_the_posix_ones():
    """The bundle's commands for Windows are the POSIX ones; the clone's are what make runs."""
    bundle_route, clone_route = blocks(offline_section(), "bat")
    posix = [c for c in commands(offline_section()) if NETWORK not in c]
    in_bundle = [as_posix(line) for line in bundle_route.splitlines()]
    steps = [c for c in posix if "-m venv" in c or c.startswith(".venv/") and "config" not in c]
    assert in_bundle == steps
    dry_run = subprocess.run(
        ["make", "-n", "-B", "install", "book", "test-fast"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    made = {line.replace("python3 -m", "py -m").strip() for line in dry_run}
    for line in clone_route.splitlines():
        normal = as_posix(line).replace("python3 -m", "py -m")
        assert normal in made, f"make runs no {normal!r}"


def test_the_section_is_linked_from_the_intro_and_the_course_page():
    for page in ("intro", "course"):
        text = (ROOT / "book" / f"{page}.md").read_text(encoding="utf-8")
        assert "{ref}`" in text and "setup-offline" in text, page
