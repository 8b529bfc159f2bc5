"""A progress bar for the lessons' training loops.

``progress(range(steps), desc="training")`` wraps an iterable in a ``tqdm`` bar: a widget in
Jupyter and Colab, a line of text in a terminal. Set ``ATTNLIB_PROGRESS=0`` to turn the bars
off: `make notebooks` and the tests do, so that no bar ends up in a committed output (a bar
shows timings, which differ on every run) and nothing else is hidden.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

#: The environment variable that turns the bars off when set to "0".
SWITCH = "ATTNLIB_PROGRESS"


def enabled() -> bool:
    """Whether ``progress`` shows a bar (it does unless ``ATTNLIB_PROGRESS=0``)."""
    return os.environ.get(SWITCH, "1") != "0"


def progress(iterable: Iterable, desc: str | None = None, total: int | None = None) -> Iterable:
    """``iterable``, with a progress bar that disappears when the loop ends.

    >>> list(progress(range(3), desc="steps")) == [0, 1, 2]
    True
    """
    if not enabled():
        return iterable
    from tqdm.auto import tqdm  # imported here: without bars, tqdm is not needed

    return tqdm(iterable, desc=desc, total=total, leave=False)
