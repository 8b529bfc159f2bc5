"""Serve MathJax 3 from the book itself, so that math renders with no network.

Sphinx's default ``mathjax_path`` points at a CDN. This extension takes MathJax
from the ``django-static-mathjax`` wheel pinned in ``requirements.txt`` (it ships
the MathJax 3.2.2 ``es5`` build as plain files inside the ``mathjax`` package),
copies the parts that ``tex-chtml.js`` loads into ``_static/mathjax/`` of the HTML
build, and points ``mathjax_path`` there. The configuration that MyST adds through
``mathjax3_config`` is left untouched.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import ExtensionError
from sphinx.util import logging

logger = logging.getLogger(__name__)

#: Where the files land, relative to ``_static`` of the HTML build.
TARGET = "mathjax"
#: The MathJax component loaded by every page (TeX input, CommonHTML output).
ENTRY = "tex-chtml.js"
#: What ``tex-chtml.js`` may fetch at run time: its fonts, TeX extensions that are
#: autoloaded (\boldsymbol, \require...), and the menu's accessibility tools.
#: The other combined builds (SVG, MathML input, "full") are not copied.
PARTS = (ENTRY, "output/chtml", "input/tex/extensions", "a11y", "ui", "sre", "adaptors")


def mathjax_es5_dir() -> Path:
    """Return the ``es5`` folder of the installed MathJax package, or raise."""
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise ExtensionError(
            "offline_mathjax: the 'mathjax' package is not installed. Install the "
            "pinned requirements (`make book` does it, or `pip install -r requirements.txt`; "
            "the package comes from django-static-mathjax)."
        )
    for location in spec.submodule_search_locations:
        es5 = Path(location) / "static" / "mathjax" / "es5"
        if (es5 / ENTRY).is_file():
            return es5
    raise ExtensionError(
        f"offline_mathjax: found the 'mathjax' package at {list(spec.submodule_search_locations)}"
        f" but no static/mathjax/es5/{ENTRY} inside it; reinstall django-static-mathjax."
    )


def set_mathjax_path(app: Sphinx, config: Config) -> None:
    mathjax_es5_dir()  # fail early, before any page is written
    # A relative mathjax_path is resolved against _static/ by the HTML builder.
    config.mathjax_path = f"{TARGET}/{ENTRY}"


def copy_mathjax(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    source = mathjax_es5_dir()
    target = Path(app.outdir) / "_static" / TARGET
    for part in PARTS:
        src = source / part
        if src.is_dir():
            shutil.copytree(src, target / part, dirs_exist_ok=True)
        else:
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target / part)
    logger.info("offline_mathjax: copied MathJax to %s", target)


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", set_mathjax_path)
    app.connect("build-finished", copy_mathjax)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
