"""Include every script once per page.

sphinx-thebe (loaded by Jupyter Book 1.x whether or not live code is enabled) registers its
inline configuration script twice, and the second copy throws "Identifier 'THEBE_JS_URL' has
already been declared" in the reader's console. This extension drops exact duplicates from
each page's list of scripts, keeping the first.
"""

from __future__ import annotations

from sphinx.application import Sphinx


def drop_duplicate_scripts(app: Sphinx, pagename, templatename, context, doctree) -> None:
    seen, unique = set(), []
    for script in context.get("script_files", []):
        filename = getattr(script, "filename", script) or ""  # None and "" both mean inline
        key = (str(filename), tuple(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def setup(app: Sphinx) -> dict:
    app.connect("html-page-context", drop_duplicate_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
