"""The role ``{lesson}`topic```: a link to another lesson, shown as that lesson's number.

Prose refers to a lesson by its topic, the name of its notebook without the number:
``lesson {lesson}`positional_encoding``` renders as "lesson 05", with "05" linked to
``lessons/05_positional_encoding.ipynb``; in Chinese, ``第 {lesson}`positional_encoding` 课``
renders as "第 05 课". The number is read from the file name at build time, so renumbering the
lessons (renaming their files) renumbers every reference with them, and a reference to a lesson
that no longer exists stops the build (``-W``). ``tests/test_references.py`` refuses a
lesson number typed by hand.
"""

from __future__ import annotations

from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx


def lesson_file(srcdir: Path, topic: str) -> Path | None:
    """The notebook ``lessons/NN_<topic>.ipynb`` under ``srcdir``, or None if there is not
    exactly one.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     (Path(folder) / "lessons").mkdir()
    ...     _ = (Path(folder) / "lessons" / "05_positional_encoding.ipynb").write_text("{}")
    ...     lesson_file(Path(folder), "positional_encoding").name
    '05_positional_encoding.ipynb'
    """
    found = sorted((srcdir / "lessons").glob(f"[0-9][0-9]_{topic}.ipynb"))
    return found[0] if len(found) == 1 else None


def lesson_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{lesson}`topic```: the lesson's number, linked to the lesson."""
    env = inliner.document.settings.env
    topic = text.strip()
    path = lesson_file(Path(env.srcdir), topic)
    if path is None:
        message = inliner.reporter.error(
            f"{{lesson}}`{topic}`: no lessons/NN_{topic}.ipynb (the role takes a lesson's file "
            "name without its number)",
            line=lineno,
        )
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    reference = addnodes.pending_xref(
        rawtext,
        refdomain="std",
        reftype="doc",
        reftarget=f"/lessons/{path.stem}",
        refexplicit=True,
        refwarn=True,
    )
    reference += nodes.inline(rawtext, path.stem[:2], classes=["xref", "std", "std-doc"])
    return [reference], []


def setup(app: Sphinx) -> dict:
    """Sphinx's entry point: register the role ``lesson``."""
    app.add_role("lesson", lesson_role)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
