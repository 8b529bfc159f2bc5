"""A progress bar for the lessons' training loops.

``progress(range(steps), desc="training")`` wraps an iterable in a ``tqdm`` bar: a widget in
Jupyter and Colab, a line of text in a terminal. A bar shows timings, which differ on every
run, so it must never reach an output that is saved or compared. It is off:

* where ``ATTNLIB_PROGRESS=0`` is set: `make notebooks` sets it, so no bar is committed;
* inside a test run, unless ``ATTNLIB_PROGRESS`` says otherwise: pytest sets
  ``PYTEST_CURRENT_TEST`` while a test runs, and the Jupyter kernel that nbval starts for a
  lesson inherits it, so ``pytest --nbval lessons/03_queries_keys_values.ipynb`` compares the
  committed outputs however it is started, with no setting of its own.

Everywhere else (a learner in Jupyter, on Colab or in a terminal) the bars show. Nothing but
the bar is ever hidden.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

#: The environment variable that turns the bars off when set to "0" (on when set otherwise).
SWITCH = "ATTNLIB_PROGRESS"
#: Set by pytest while a test runs, and inherited by the kernels that nbval starts.
UNDER_PYTEST = "PYTEST_CURRENT_TEST"


def enabled() -> bool:
    """Whether ``progress`` shows a bar: as ``ATTNLIB_PROGRESS`` says when it is set, and
    otherwise unless a test is running."""
    setting = os.environ.get(SWITCH)
    if setting is not None:
        return setting != "0"
    return UNDER_PYTEST not in os.environ


def progress(iterable: Iterable, desc: str | None = None, total: int | None = None) -> Iterable:
    """``iterable``, with a progress bar that disappears when the loop ends.

    >>> list(progress(range(3), desc="steps")) == [0, 1, 2]
    True
    """
    if not enabled():
        return iterable
    from tqdm.auto import tqdm  # imported here: without bars, tqdm is not needed

    return tqdm(iterable, desc=desc, total=total, leave=False)
