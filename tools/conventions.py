"""The fixed parts of every lesson, derived from ``_config.yml`` (the one place the
repository URL lives). The notebook-convention tests compare each lesson against these.

    python tools/conventions.py lessons/01_sequences_of_vectors.ipynb

prints the badge line and the setup cell that the lesson must contain.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SETUP_TAG = "setup"
EXERCISE_TAG = "exercise"
SOLUTION_TAG = "solution"
#: Cell metadata of a solution cell: the label of its dropdown in the HTML book.
SOLUTION_METADATA = {
    "code_prompt_show": "Show the solution",
    "code_prompt_hide": "Hide the solution",
}


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


def setup_cell() -> str:
    """The first code cell of every lesson: installs attnlib on Colab, silent elsewhere."""
    url, _ = repository()
    return (
        "# On Google Colab, install attnlib from the book's repository; elsewhere do nothing.\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        "    import subprocess\n"
        "\n"
        f'    package = "attnlib[torch] @ git+{url}"\n'
        '    subprocess.run([sys.executable, "-m", "pip", "install", "-q", package], check=True)'
    )


if __name__ == "__main__":
    for path in sys.argv[1:]:
        print(colab_badge(path), end="\n\n")
    print(setup_cell())
