"""The offline bundle: the whole book in one zip, for a learner who cannot reach Colab or GitHub.

    python tools/bundle.py [--html _build/html] [--out _build/self-attention-book-offline.zip]

``make bundle`` builds both editions first (``make book``), then runs this. The archive holds
one folder, ``self-attention-book/``, with

- ``README.md``: how to read and run it with nothing but Python and a package index (or a
  folder of wheels), in Chinese and in English (``tools/bundle_readme.md``);
- ``html/``: the built book, the Chinese edition in ``html/zh/``; it reads offline, math
  included (the build ships its own MathJax);
- ``lessons/`` and ``zh/lessons/``: the notebooks of both editions, with their outputs;
- ``wheels/attnlib-<version>-py3-none-any.whl``: the package, with its compiled catalog of
  the checkers' Chinese;
- ``requirements.txt``: the lock, the exact versions the book is tested with.

``tests/test_bundle.py`` builds one from the test run's book, unpacks it into an empty folder
and runs the README's commands there.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

from conventions import run_tool

ROOT = Path(__file__).resolve().parent.parent
FOLDER = "self-attention-book"  # the one folder inside the archive
README = ROOT / "tools" / "bundle_readme.md"
DEFAULT_OUT = ROOT / "_build" / "self-attention-book-offline.zip"
#: What the wheel is built from: the package's own files, copied out of the checkout so that
#: the build leaves nothing behind in it (no build/, no egg-info).
PACKAGE_FILES = ("pyproject.toml", "README.md", "LICENSE", "attnlib")


def build_wheel(out: Path) -> Path:
    """Build attnlib's wheel (with ``attnlib.mo``) into ``out``; return its path."""
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "attnlib-source"
        source.mkdir()
        for name in PACKAGE_FILES:
            path = ROOT / name
            if path.is_dir():
                ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
                shutil.copytree(path, source / name, ignore=ignore)
            else:
                shutil.copy2(path, source / name)
        command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"]
        command += ["--no-build-isolation", "--wheel-dir", str(out), str(source)]
        run_tool(command)
    (wheel,) = out.glob("attnlib-*.whl")
    return wheel


def bundle_files(html: Path, wheel: Path) -> dict[str, Path]:
    """{name inside the archive's folder: file on disk} for everything the bundle holds."""
    if not (html / "index.html").is_file() or not (html / "zh" / "index.html").is_file():
        raise FileNotFoundError(f"{html} does not hold both editions: run `make book` first")
    files = {"README.md": README, "requirements.txt": ROOT / "requirements.txt"}
    files[f"wheels/{wheel.name}"] = wheel
    for edition in ("lessons", "zh/lessons"):
        for notebook in sorted((ROOT / edition).glob("*.ipynb")):
            files[f"{edition}/{notebook.name}"] = notebook
    for path in sorted(html.rglob("*")):
        if path.is_file() and ".buildinfo" not in path.name:
            files[f"html/{path.relative_to(html).as_posix()}"] = path
    return files


def build_bundle(html: Path, out: Path) -> Path:
    """Write the archive ``out`` from the built book in ``html``; return ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        files = bundle_files(html, build_wheel(Path(tmp)))
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
            for name, path in files.items():
                archive.write(path, f"{FOLDER}/{name}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--html", type=Path, default=ROOT / "_build" / "html")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    out = build_bundle(args.html, args.out)
    print(f"wrote {out} ({out.stat().st_size / 2**20:.0f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
