"""Local processes joined in one ``torch.distributed`` group, from a script or a notebook
cell: ``launch``."""

from __future__ import annotations

import ctypes
import os
import pickle
import queue
import signal
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as multiprocessing

from .. import _checks

__all__ = ["launch", "default_start_method"]

# --------------------------------------------------------------------------- local processes


def default_start_method() -> str:
    """``"fork"`` on Linux (quick, and runs functions defined in a notebook), else
    ``"spawn"`` (macOS and Windows: fork is unsafe or missing there)."""
    return "fork" if sys.platform.startswith("linux") else "spawn"


def launch(
    fn: Callable,
    world_size: int,
    *args,
    backend: str = "gloo",
    timeout: float = 120.0,
    start_method: str | None = None,
    **kwargs,
) -> list:
    """Run ``fn(*args, **kwargs)`` in ``world_size`` new local processes joined in one
    ``torch.distributed`` group, and return what each returned, rank by rank.

    Inside ``fn``, ``torch.distributed.get_rank()`` says which process it is. What ``fn``
    returns must be picklable (tensors are). If a process raises, the others are stopped and a
    RuntimeError carries its traceback; if they have not all answered after ``timeout``
    seconds (a hang), they are stopped and a TimeoutError says which did not answer.

    The processes find each other through a file in a new temporary folder
    (``torch.distributed.FileStore``), not a TCP port: no port to collide with another
    program's, and nothing that listens on the network for the meeting itself. ``gloo`` then
    connects the processes over the loopback interface only (``GLOO_SOCKET_IFNAME``, set in
    each process to the interface of 127.0.0.1 where the system names one). The group is made
    in the new processes only: this one holds no part of it, so that nothing of it is copied
    half-working into a forked process. ``backend``: ``"gloo"`` (CPU tensors) or ``"nccl"``
    (process ``r`` uses GPU ``r``: a ValueError if there are more processes than GPUs; CUDA
    cannot be used in a forked process, so spawn is the default then). On Linux a process
    dies with the one that launched it, even when that one is killed (``_die_with_parent``).

    ``start_method`` (``default_start_method``): ``"fork"`` copies this process, so ``fn`` can
    be any function, one defined in a notebook cell included; each process then computes on one
    thread (PyTorch's OpenMP threads do not survive a fork). ``"spawn"`` starts fresh Python
    interpreters (seconds each, to import torch), which must import ``fn`` by name: it has to
    be defined at the top level of a ``.py`` file, such as
    ``attnlib.distributed.compare_with_dense``, not in a notebook cell (and a script that calls
    ``launch`` must do so under ``if __name__ == "__main__":``). Linux: both; macOS and
    Windows: spawn.

    >>> launch(dist.get_rank, 3)
    [0, 1, 2]
    """
    _checks.require_positive_int("launch", "world_size", world_size)
    _checks.check_choice("launch", "backend", backend, ("gloo", "nccl"))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend == "nccl" and world_size > gpus:
        raise ValueError(
            f"launch: backend='nccl' needs one GPU per process; got world_size={world_size} "
            f"with {gpus} GPU(s) here. Use fewer processes, or backend='gloo' on the CPU"
        )
    method = start_method or ("spawn" if backend == "nccl" else default_start_method())
    if method == "fork":
        _import_what_a_backward_pass_imports()
    for attempt in range(1, GROUP_ATTEMPTS + 1):
        with tempfile.TemporaryDirectory(prefix="attnlib-launch-") as folder:
            job = Job(
                fn, args, kwargs, world_size, rendezvous_file(folder), backend, timeout, method
            )
            try:
                return _launch_once(job)
            except GroupNotFormed as failure:
                last_failure = failure
        if attempt == GROUP_ATTEMPTS:
            raise RuntimeError(
                f"launch: the {world_size} processes could not form a group "
                f"({GROUP_ATTEMPTS} attempts); the last error:\n{last_failure}"
            ) from last_failure


#: How many times ``launch`` starts the processes again when they fail to form their group:
#: gloo's connections between processes fail now and then, rarely (about 1 launch in 50 on the
#: 2-core machine, ``Connection closed by peer`` in ``connectFullMesh``; PyTorch's own test
#: suite has met it too).
GROUP_ATTEMPTS = 3


class GroupNotFormed(RuntimeError):
    """A process of ``launch`` failed while joining the group, before it ran anything."""


def _import_what_a_backward_pass_imports() -> None:
    """Import here what a process imports on its first backward pass with given gradients
    (``torch.fx.experimental.symbolic_shapes``, and with it SymPy: 0.4 to 0.7 s), so that
    the processes ``launch`` forks inherit it instead of each importing it again: that import
    was most of the time of a two-process comparison with dense attention (0.44 s of 0.46)."""
    import torch.fx.experimental.symbolic_shapes  # noqa: F401


def _launch_once(job: Job) -> list:
    """Start the processes of ``job``, collect their results, stop them."""
    context = multiprocessing.get_context(job.start_method)
    answers = context.Queue()
    processes = [
        context.Process(target=_run_in_group, args=(rank, job, answers), daemon=True)
        for rank in range(job.world_size)
    ]
    try:
        for process in processes:
            _start(process, job)
        results = _collect(processes, answers, job.timeout)
    except BaseException:
        _stop(processes, grace=0.0)
        raise
    _stop(processes, grace=10.0)
    return results


def rendezvous_file(folder: str) -> str:
    """The file in ``folder`` through which the processes of one launch find each other
    (``torch.distributed.FileStore``); a new folder for every attempt."""
    return os.path.join(folder, "rendezvous")


def open_rendezvous(path: str, world_size: int) -> dist.Store:
    """The store of one launch's processes: a ``FileStore`` on ``path``, which every process
    opens (nothing listens on a port for it)."""
    return dist.FileStore(path, world_size)


def loopback_interface() -> str | None:
    """The name of the network interface of 127.0.0.1 (``lo`` on Linux, ``lo0`` on macOS),
    or None where the system does not list its interfaces by name."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (AttributeError, OSError):  # Windows without if_nameindex
        return None
    return next((name for name in ("lo", "lo0") if name in names), None)


def _die_with_parent(parent: int) -> None:
    """On Linux, ask the kernel to end this process when its parent ends, however the parent
    ends (``prctl(PR_SET_PDEATHSIG, SIGKILL)``); if the parent has already gone, end now.
    Elsewhere nothing: there a process of ``launch`` ends only when its parent exits normally
    (``daemon=True``) or when ``launch`` stops it."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # the parent ended before the request took hold
        os._exit(1)


@dataclass
class Job:
    """What every process of ``launch`` needs: the call, and how to join the group."""

    fn: Callable
    args: tuple
    kwargs: dict
    world_size: int
    rendezvous: str  # the file through which the processes find each other (FileStore)
    backend: str
    timeout: float
    start_method: str
    parent: int = field(default_factory=os.getpid)  # the process that launched them


def _start(process, job: Job) -> None:
    """Start one process; explain the usual reason a spawned process cannot get ``fn``."""
    try:
        process.start()
    except (pickle.PicklingError, AttributeError, TypeError) as error:
        name = getattr(job.fn, "__qualname__", job.fn)
        raise RuntimeError(
            f"launch: start_method={job.start_method!r} must send {name!r} to new Python "
            f"processes, which import it by name, and could not ({error}). Define it at the top "
            f"level of a module (a .py file), not in a notebook cell, or use "
            f"start_method='fork' (Linux)"
        ) from error


def _run_in_group(rank: int, job: Job, answers) -> None:
    """One process of ``launch``: join the group, run the call, send back its result (pickled
    here, so that tensors travel by value) or the traceback (and whether it had joined)."""
    _die_with_parent(job.parent)
    forked = job.start_method == "fork"  # then one thread: OpenMP's do not survive a fork
    torch.set_num_threads(1 if forked else max(1, (os.cpu_count() or 1) // job.world_size))
    joined = False
    try:
        if job.backend == "nccl":
            torch.cuda.set_device(rank)
        loopback = loopback_interface()
        if job.backend == "gloo" and loopback is not None:
            os.environ["GLOO_SOCKET_IFNAME"] = loopback  # gloo's connections: 127.0.0.1 only
        dist.init_process_group(
            job.backend,
            store=open_rendezvous(job.rendezvous, job.world_size),
            rank=rank,
            world_size=job.world_size,
            timeout=timedelta(seconds=job.timeout),
        )
        joined = True
        answers.put((rank, None, pickle.dumps(job.fn(*job.args, **job.kwargs))))
    except BaseException:
        answers.put((rank, (joined, traceback.format_exc()), None))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _collect(processes, answers, timeout: float) -> list:
    """Every process's result, rank by rank; raise at the first failure, or at the timeout."""
    results, answered = [None] * len(processes), set()
    deadline = time.monotonic() + timeout
    while len(answered) < len(processes):
        try:
            rank, error, payload = answers.get(timeout=0.2)
        except queue.Empty:
            _check_alive(processes, answered, deadline, timeout)
            continue
        if error is not None:
            joined, trace = error
            failed = RuntimeError if joined else GroupNotFormed
            raise failed(f"launch: process {rank} of {len(processes)} failed:\n{trace}")
        results[rank] = pickle.loads(payload)
        answered.add(rank)
    return results


def _check_alive(processes, answered, deadline: float, timeout: float) -> None:
    """Raise if a process died without answering, or if the time is up."""
    for rank, process in enumerate(processes):
        if rank not in answered and process.exitcode not in (None, 0):
            raise RuntimeError(
                f"launch: process {rank} of {len(processes)} died (exit code "
                f"{process.exitcode}) without an answer"
            )
    if time.monotonic() > deadline:
        silent = [rank for rank in range(len(processes)) if rank not in answered]
        raise TimeoutError(
            f"launch: processes {silent} of {len(processes)} did not answer within "
            f"{timeout:g} s (a hang: a process waiting for a message no other process sends?)"
        )


def _stop(processes, grace: float) -> None:
    """Let the processes finish for up to ``grace`` seconds, then end those still running."""
    deadline = time.monotonic() + grace
    for process in processes:
        if process.pid is not None:
            process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.pid is not None and process.is_alive():
            process.terminate()
            process.join(2.0)
            if process.is_alive():
                process.kill()
                process.join()
