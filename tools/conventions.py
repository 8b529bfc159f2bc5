"""The fixed parts of every lesson, derived from ``_config.yml`` (the one place the
repository URL lives). The notebook-convention tests compare each lesson against these.

The rule for outputs: an output that nbval compares must be the same on any CPU (AVX2 or
AVX-512, ARM), any thread count and any BLAS the pinned versions allow. Exact results
(constructions, parities, counts, closed forms, float64 computations) are printed and
compared in full. Figures that come out of a float32 training run or a timing are not: their
cell is tagged ``nbval-ignore-output`` (``IGNORE_OUTPUT_TAG``), prints this machine's
figures, and carries its claims in asserts with honest margins, which hold on every machine
and for other seeds (``tools/seed_sweep.py``). ``make test`` runs every lesson on a
simulated other computer (``tools/run_notebooks.other_machine_env``) and compares every
compared output byte for byte, to enforce this (``tests/test_lessons.py``).

The repository's address is written once, as ``repository.url`` in ``_config.yml``.

    python tools/conventions.py --write

rewrites everything derived from it (each lesson's Colab badge and setup cell,
``pyproject.toml``'s URLs, the clone and install lines of README and the book's pages);
``make conventions`` runs it, and ``make notebooks`` runs it first. Without ``--write`` it
lists the files that disagree (``tests/test_conventions.py`` fails on any).
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SETUP_TAG = "setup"
EXERCISE_TAG = "exercise"
SOLUTION_TAG = "solution"
#: Output that depends on the machine (a timing, the digits of a training run): not compared.
IGNORE_OUTPUT_TAG = "nbval-ignore-output"
#: Cell metadata of the setup cell: the label of its dropdown in the HTML book.
SETUP_METADATA = {
    "code_prompt_show": "Show the Colab setup cell",
    "code_prompt_hide": "Hide the Colab setup cell",
}
#: Cell metadata of a solution cell: the label of its dropdown in the HTML book.
SOLUTION_METADATA = {
    "code_prompt_show": "Show the solution",
    "code_prompt_hide": "Hide the solution",
}


def run_tool(command: list, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run one of the tools the book is built with (jupyter-book, sphinx-intl, pip); if it
    fails or hangs, a RuntimeError that ends with the last 20 lines it wrote."""
    name = command[2] if command[1:2] == ["-m"] else Path(str(command[0])).name
    try:
        return subprocess.run(command, check=True, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(
            f"{name} ran past {timeout:g} s: {' '.join(map(str, command))}"
        ) from None
    except subprocess.CalledProcessError as error:
        said = "\n".join((error.stdout + error.stderr).strip().splitlines()[-20:])
        raise RuntimeError(f"{name} failed (exit status {error.returncode}):\n{said}") from None


#: One sitting per lesson: the most words of prose a lesson may have (its "Going further"
#: section, exercises and key-terms table included).
MAX_PROSE_WORDS = 4_000
_NOT_PROSE = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$|`[^`\n]*`|<[^>]+>|\]\([^)]*\)|\{[a-z]+\}", re.S)


def prose_words(notebook: dict) -> int:
    """Words of prose in a notebook's Markdown cells and figure captions: math, code spans,
    tags and link targets left out, so that ``$QK^T$`` or a URL is not counted as words.

    >>> prose_words({"cells": [{"cell_type": "markdown", "source": "Scores $s = q k^T$ are `x`."}]})
    2
    """
    words = 0
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        else:  # a figure's caption (cell metadata mystnb.figure.caption) is read as prose too
            source = cell.get("metadata", {}).get("mystnb", {}).get("figure", {}).get("caption", "")
        words += len(re.findall(r"[^\W\d_][\w'’-]*", _NOT_PROSE.sub(" ", source)))
    return words


def repository() -> tuple[str, str]:
    """``(url, branch)`` of the book's repository, from ``_config.yml``."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    repo = config["repository"]
    return repo["url"].rstrip("/"), repo.get("branch", "main")


def toc_entries() -> list[str]:
    """All ``file`` entries of the jb-book ``_toc.yml``, the root first."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    found = [toc["root"]]

    def walk(items):
        for item in items or []:
            if "file" in item:
                found.append(item["file"])
            walk(item.get("chapters"))
            walk(item.get("sections"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return found


def colab_url(notebook: str) -> str:
    """The Colab link that opens ``notebook`` (a path relative to the repository root)."""
    url, branch = repository()
    github_path = url.removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{github_path}/blob/{branch}/{notebook}"


def colab_badge(notebook: str) -> str:
    """An "Open in Colab" badge as inline HTML; the SVG is embedded, so it shows offline."""
    svg = base64.b64encode((ROOT / "tools" / "colab-badge.svg").read_bytes()).decode()
    return (
        f'<a href="{colab_url(notebook)}" target="_blank" rel="noopener">'
        f'<img src="data:image/svg+xml;base64,{svg}" alt="Open in Colab"/></a>'
    )


#: What the setup cell prints, in each edition's language ({source} is the source it installs
#: from). The Chinese notebooks' setup cell is ``setup_cell("zh_CN")``: the same program with
#: these strings in Chinese, because a learner who cannot reach GitHub meets them first.
SETUP_MESSAGES = {
    "en": {
        "installed": "attnlib installed from {source}",
        "failed": "Could not install attnlib from {source}. pip said:",
        "fix": [
            "To fix it: check the address and your connection, or install from elsewhere:",
            '  os.environ["ATTNLIB_SOURCE"] = "git+https://github.com/<you>/<your fork>"',
            "(or the path of a wheel or of a clone), then run this cell again.",
        ],
    },
    "zh_CN": {
        "installed": "已从 {source} 安装 attnlib",
        "failed": "无法从 {source} 安装 attnlib。pip 的输出：",
        "fix": [
            "解决办法：检查地址和网络连接，或者改从别处安装，例如离线包中的 wheel：",
            '  os.environ["ATTNLIB_SOURCE"] = "/path/to/attnlib-0.1.0-py3-none-any.whl"',
            "（也可以是一个克隆的路径，或者 git+https:// 地址），然后重新运行这个单元格。",
        ],
    },
}


def string_literals(lines: list[str]) -> str:
    """Python string literals for lines of text, one per line, joined by newlines when printed."""
    literals = []
    for index, line in enumerate(lines):
        text = line + ("\\n" if index < len(lines) - 1 else "")
        quote = "'" if '"' in line else '"'
        literals.append(f"{quote}{text}{quote}")
    return "\n            ".join(literals)


def setup_cell(language: str = "en") -> str:
    """The first code cell of every lesson: installs attnlib on Colab, silent elsewhere.

    ``ATTNLIB_SOURCE`` points it at another source (a fork, a mirror, a local wheel or
    clone), and makes it install outside Colab too. On failure it prints pip's last lines
    and what to do, instead of a traceback, in ``language`` (``SETUP_MESSAGES``).
    """
    url, _ = repository()
    messages = SETUP_MESSAGES[language]
    installed, failed = (
        messages[k].replace("{source}", "{attnlib_source}") for k in ("installed", "failed")
    )
    return f"""\
# Colab setup: install attnlib and what the lessons need (attnlib[lessons]). Elsewhere it
# does nothing, unless ATTNLIB_SOURCE names a source: a git URL, a wheel, a folder.
import os
import sys

BOOK_REPOSITORY = "{url}"
attnlib_source = os.environ.get("ATTNLIB_SOURCE", f"git+{{BOOK_REPOSITORY}}")
if "google.colab" in sys.modules or "ATTNLIB_SOURCE" in os.environ:
    import subprocess

    remote = attnlib_source.startswith(("git+", "http://", "https://", "file:"))
    package = f"attnlib[lessons] @ {{attnlib_source}}" if remote else f"{{attnlib_source}}[lessons]"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", package]
    result = subprocess.run(pip, capture_output=True, text=True)
    if result.returncode == 0:
        print(f"{installed}")
    else:
        print(f"{failed}")
        print("\\n".join(result.stderr.strip().splitlines()[-15:]))
        print(
            {string_literals(messages["fix"])}
        )"""


# ------------------------------------------------------------------ one home for the address

CLONE = re.compile(r"git clone https://github\.com/[\w.-]+/[\w.-]+\n( *)cd [\w.-]+")
INSTALL = re.compile(r"git\+https://github\.com/[\w.-]+/[\w.-]+?(?=[\"'\s])")
BADGE = re.compile(r'<a href="https://colab\.research\.google\.com/[^"]*"[^>]*><img [^>]*/></a>')
PROJECT_URLS = re.compile(r"(?ms)^\[project\.urls\]\n.*?(?=^\[|\Z)")
PAGES = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "book").glob("*.md"))]


def synced_page(text: str) -> str:
    """A page with its clone and install lines naming the configured repository."""
    url, _ = repository()
    folder = url.rsplit("/", 1)[-1]
    text = CLONE.sub(lambda m: f"git clone {url}\n{m.group(1)}cd {folder}", text)
    return INSTALL.sub(f"git+{url}", text)


def synced_pyproject(text: str) -> str:
    url, _ = repository()
    urls = f'[project.urls]\nHomepage = "{url}"\nRepository = "{url}"\nIssues = "{url}/issues"\n\n'
    return PROJECT_URLS.sub(urls, text, count=1)


def synced_notebook(path: Path) -> str:
    """The lesson's JSON with its badge, setup cell and their metadata regenerated."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    notebook = path.relative_to(ROOT).as_posix()
    first = nb.cells[0]
    first.source = BADGE.sub(lambda _: colab_badge(notebook), first.source)
    setup = next(cell for cell in nb.cells if cell.cell_type == "code")
    setup.source = setup_cell()
    setup.metadata["tags"] = [SETUP_TAG, "hide-input"]
    setup.metadata["mystnb"] = dict(SETUP_METADATA)
    text = nbformat.writes(nb, version=4, indent=1, ensure_ascii=False)
    return text if text.endswith("\n") else text + "\n"


def sync(write: bool = False) -> list[str]:
    """The files whose derived parts disagree with ``_config.yml``; rewrite them if ``write``."""
    targets = {ROOT / page: synced_page for page in PAGES}
    targets[ROOT / "pyproject.toml"] = synced_pyproject
    changed = []
    for path, synced in targets.items():
        old = path.read_text(encoding="utf-8")
        new = synced(old)
        if new != old:
            changed.append(path.relative_to(ROOT).as_posix())
            if write:
                path.write_text(new, encoding="utf-8")
    for path in sorted((ROOT / "lessons").glob("*.ipynb")):
        old = path.read_text(encoding="utf-8")
        new = synced_notebook(path)
        if json.loads(new) != json.loads(old):
            changed.append(path.relative_to(ROOT).as_posix())
            if write:
                path.write_text(new, encoding="utf-8")
    return changed


if __name__ == "__main__":
    changed = sync(write="--write" in sys.argv)
    verb = "rewrote" if "--write" in sys.argv else "disagree with _config.yml"
    print(f"{verb}: {', '.join(changed)}" if changed else "everything agrees with _config.yml")
    sys.exit(1 if changed and "--write" not in sys.argv else 0)
