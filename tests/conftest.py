"""Fixtures and scheduling shared by the test modules.

What `make test` runs, and where (``pytest -n auto``: one worker per core):

- ``tests/test_lessons.py`` runs every lesson once, on a simulated other computer, and
  compares every output with the committed one (and runs nbval on one lesson as a reader
  would);
- ``tests/test_fresh_learner.py`` runs two lessons in a brand-new environment, as a learner
  on Colab would;
- ``tests/test_book.py`` and ``tests/test_browser.py`` build both editions once
  (``book_html``) and open every page in Chromium; ``tests/test_bundle.py`` packs that build
  into the offline bundle and runs a lesson from it;
- ``tests/test_translations.py`` extracts the English messages once and checks the catalogs;
- everything else (not marked ``slow``; `make test-fast` runs only these) checks ``attnlib``,
  the exercises and the lessons' conventions without running a lesson.

Each worker runs one thread per process, so that two workers on two cores do not fight; the
longest jobs start first (``pytest_collection_modifyitems``), so that the run does not end
with one worker still in a long lesson while the other waits.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

ROOT = Path(__file__).resolve().parent.parent

if os.environ.get("PYTEST_XDIST_WORKER"):  # one thread per process, the kernels' included
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(variable, "1")
    # where a test asks for more threads, those that wait sleep instead of spinning on a core
    # that the other worker needs
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

JUPYTER_BOOK = Path(sys.executable).parent / "jupyter-book"


def pytest_configure(config):
    """In each process that runs tests: import attnlib.triton before any test module. Triton
    runs a whole process compiled or interpreted, fixed by whatever imports it first
    (torch.utils.flop_counter does, for lesson 04's checker); attnlib.triton chooses the
    interpreter where there is no CUDA GPU."""
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        import attnlib.triton  # noqa: F401


def build_book(source: Path, out: Path) -> Path:
    """Build one edition with warnings as errors; return its HTML directory."""
    cmd = [str(JUPYTER_BOOK), "build", str(source), "--path-output", str(out), "-W", "-n"]
    proc = subprocess.run(
        [*cmd, "--keep-going"], capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, (
        f"{source.name or 'book'} build failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-4000:]}"
    )
    return out / "_build" / "html"


@pytest.fixture(scope="session")
def book_html(tmp_path_factory) -> Path:
    """Build the book as `make book` does, once per test run, into a temporary folder: the
    English edition, and the Chinese one (from ``zh/``) in its ``zh/`` subfolder. Return
    the HTML directory."""
    out = tmp_path_factory.mktemp("book")
    html = build_book(ROOT, out)
    shutil.copytree(build_book(ROOT / "zh", out / "zh"), html / "zh")
    return html


class KeepTogetherScheduling(LoadScopeScheduling):
    """pytest-xdist scheduling for `make test` (``-n auto``): every test goes to whichever
    worker is free, in the order of ``pytest_collection_modifyitems``, except what must share a
    process: the tests of the built book (they share one build), the fresh learner's lessons
    (they share one new environment) and the translation tests (they share one extraction).

    xdist's public way, ``--dist loadgroup`` with ``xdist_group`` marks, does not group with
    the pinned versions: xdist 3.8 renames grouped tests through ``item._nodeid``, and pytest
    9.2 no longer reads it (measured: a group of 20 tests split 10 and 10 over two workers, and
    `make test-fast` took 69 s instead of 51, both workers extracting the messages). Hence this
    subclass of the scheduler xdist documents for ``--dist loadscope``."""

    def __init__(self, config, log=None):
        super().__init__(config, log)
        config.option.loadscopereorder = False  # keep our order: the longest first

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)


def scope_of(nodeid: str) -> str:
    """The tests that must run in one process: a module for these, else the test itself."""
    path = nodeid.split("::", 1)[0]
    if path.endswith(("test_book.py", "test_browser.py", "test_bundle.py")):
        return "the built book"
    if path.endswith(("test_fresh_learner.py", "test_translations.py")):
        return path
    return nodeid


def pytest_xdist_make_scheduler(config, log):
    return KeepTogetherScheduling(config, log)


#: How long the long jobs took on this 2-core machine, in seconds (`make test` prints the
#: slowest tests). Only the order of the run depends on these numbers: the longest first, then
#: everything else as collected. A run records what each job took in pytest's cache, and the
#: next run on the same checkout orders by those figures instead.
EXPECTED_SECONDS = {
    "the built book": 240,  # both editions, every page in Chromium, the offline bundle run
    "[16_putting_it_together]": 136,
    "[12_self_attention_and_cnns]": 115,
    "[07_sequence_to_sequence]": 91,
    "[13_self_attention_and_rnns]": 84,
    "tests/test_fresh_learner.py": 78,
    "[15_efficient_attention]": 55,
    "[11_attention_across_devices]": 45,
    "[09_flash_attention]": 40,
    "[08_truncated_self_attention]": 40,
    "[05_positional_encoding]": 37,
    "tests/test_gpu_ready.py": 35,
    "[04_multi_head_attention]": 30,
    "[10_attention_at_inference]": 26,
    "test_quick_bench_reports_every_row": 24,
    "tests/test_translations.py": 23,
    "[14_self_attention_on_graphs]": 17,
    "[03_queries_keys_values]": 11,
    "test_nbval_passes_on_a_lesson_with_progress_bars": 11,
}
MEASURED = "attnlib/scope-seconds"  # the cache key of the last run's figures


def expected_seconds(scope: str, measured: dict[str, float]) -> float:
    """How long ``scope`` should take: the last run's figure, else the table's, else 0."""
    if scope in measured:
        return measured[scope]
    return max((s for key, s in EXPECTED_SECONDS.items() if key in scope), default=0)


#: The seconds each job took in this run, added up in the main process (xdist sends it every
#: report).
SCOPE_SECONDS: dict[str, float] = {}

#: Jobs that are not run again where they passed in full and nothing has changed since: no
#: tracked file of the checkout (``checkout_digest``), no installed distribution, not Python.
#: Building both editions and opening every page in Chromium, and the fresh learner's new
#: environment, are what `make test` on an unchanged tree would otherwise spend most of its
#: time on; a fresh clone (CI) runs them, and so does ``pytest --cache-clear``.
RUN_ONCE = ("the built book", "tests/test_fresh_learner.py")
PASSED_WITH = "attnlib/passed-with/"  # + the job: the checkout digest of its last full pass
COLLECTED: Counter = Counter()  # tests of each RUN_ONCE job in this run
OUTCOMES: dict[str, Counter] = {scope: Counter() for scope in RUN_ONCE}


def installed_distributions() -> list[str]:
    """``name==version`` of every distribution installed in this environment, each once and
    sorted: what the tests actually run with (the pins say what should be installed). Once: a
    build of attnlib in the checkout (the fresh learner's) leaves an egg-info there, which
    importlib.metadata also finds, from the working directory, beside the installed one."""
    found = {
        (d.metadata["Name"] or "").lower(): d.version for d in importlib.metadata.distributions()
    }
    return [f"{name}=={version}" for name, version in sorted(found.items())]


def files_digest(files: list[Path], *extra) -> str:
    """A digest of ``files`` (each one's path in the checkout and its bytes, in the order
    given) and of ``extra`` (values JSON can write): the inputs of a job that is not run again
    while they stay the same."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.relative_to(ROOT)}\0".encode() + path.read_bytes() + b"\0")
    digest.update(json.dumps(extra, sort_keys=True).encode())
    return digest.hexdigest()


@functools.cache
def checkout_digest() -> str | None:
    """A digest of every file git tracks here (as it is on disk), the installed distributions
    and this Python; None outside a git checkout (then nothing is skipped)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    files = [ROOT / name.decode() for name in sorted(filter(None, listed.split(b"\0")))]
    files = [path for path in files if path.is_file()]
    return files_digest(files, installed_distributions(), sys.version, platform.machine())


def skip_what_passed_unchanged(config, items) -> None:
    """Skip each RUN_ONCE job that passed in full on this very checkout and environment."""
    cache = getattr(config, "cache", None)
    digest = checkout_digest() if cache is not None else None
    if digest is None:
        return
    for item in items:
        scope = scope_of(item.nodeid)
        if scope in RUN_ONCE and cache.get(PASSED_WITH + scope, None) == digest:
            reason = f"passed in full before on this unchanged checkout ({digest[:12]})"
            item.add_marker(pytest.mark.skip(reason=reason + "; --cache-clear reruns"))


def count_run_once(nodeids) -> None:
    """Note how many tests of each RUN_ONCE job this run has (after any deselection)."""
    COLLECTED.clear()
    COLLECTED.update(s for s in map(scope_of, nodeids) if s in RUN_ONCE)


def pytest_collection_finish(session):
    config = session.config
    if not hasattr(config, "workerinput") and not config.getoption("numprocesses", None):
        count_run_once(item.nodeid for item in session.items)  # without xdist: they are here


def pytest_xdist_node_collection_finished(node, ids):
    count_run_once(ids)  # every worker collects the same tests


def pytest_collection_modifyitems(session, config, items):
    """The longest jobs first (a stable sort: the rest stays in collection order)."""
    cache = getattr(config, "cache", None)
    measured = cache.get(MEASURED, {}) if cache is not None else {}
    cost = {
        scope: expected_seconds(scope, measured)
        for scope in map(scope_of, (i.nodeid for i in items))
    }
    items.sort(key=lambda item: -cost[scope_of(item.nodeid)])
    skip_triton_examples_without_triton(items)
    skip_what_passed_unchanged(config, items)


def skip_triton_examples_without_triton(items):
    """attnlib.triton's examples run its kernels: without triton (it ships for Linux only)
    they are skipped, not failed."""
    if importlib.util.find_spec("triton") is None:
        for item in items:
            if item.nodeid.startswith("attnlib/triton.py"):
                item.add_marker(pytest.mark.skip(reason="needs the triton package (Linux only)"))


def pytest_runtest_logreport(report):
    """Add each report's seconds (setup, call, teardown) to its job's, and count the outcomes
    of the RUN_ONCE jobs."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        scope = scope_of(report.nodeid)
        SCOPE_SECONDS[scope] = SCOPE_SECONDS.get(scope, 0.0) + report.duration
        if scope in RUN_ONCE and (report.when == "call" or not report.passed):
            OUTCOMES[scope][report.outcome] += 1


def pytest_sessionfinish(session, exitstatus):
    """Keep the long jobs' figures for the next run's order."""
    cache = getattr(session.config, "cache", None)
    if cache is not None and SCOPE_SECONDS and "PYTEST_XDIST_WORKER" not in os.environ:
        long_jobs = {scope: round(s, 1) for scope, s in SCOPE_SECONDS.items() if s >= 5}
        cache.set(MEASURED, {**cache.get(MEASURED, {}), **long_jobs})
    if cache is not None and "PYTEST_XDIST_WORKER" not in os.environ:
        for scope in RUN_ONCE:
            outcomes = OUTCOMES[scope]
            if outcomes["failed"]:
                cache.set(PASSED_WITH + scope, None)
            elif COLLECTED[scope] and outcomes["passed"] == COLLECTED[scope]:  # all, not a -k
                cache.set(PASSED_WITH + scope, checkout_digest())
