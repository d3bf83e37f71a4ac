"""Jobs that run inside the Snakemake process that schedules them.

A job started as its own Python process pays ~10 s before its first useful line on a CPU (torch ~2 s, the
transformers modules a model needs ~7 s) and then loads its model again; in the demo that was more than the work of
most jobs. The rules therefore call their scripts with ``run:`` and :func:`run_script`, and the workflow is run
with ``--force-use-threads`` (``profiles/local``, ``make demo``; Snakemake itself adds it to every single job it
submits to SLURM): each job runs in a thread of one long-lived process, imports are paid once, and models come from
:mod:`lm.model_pool`. Without the flag Snakemake spawns one process per ``run:`` job and everything still works,
only slower.

Two pieces of shared state need care when jobs share a process:
- torch's intra-op thread count, on which a job's numbers depend (it splits float32 reductions). With torch's
  OpenMP backend (that of torch's Linux wheels) it is a setting of each OS thread, not of the process:
  ``torch.set_num_threads`` sets the calling thread's OpenMP and MKL counts, other threads keep theirs, and a
  thread first using torch takes the count last set anywhere. Snakemake reuses its worker threads from job to
  job, so :func:`torch_threads` sets the job's own count in the job's own thread every time and checks it: jobs
  of any counts then run side by side with the bytes of a serial run (tests/test_determinism.py). Helper threads
  of a job (shard writer, statistics readers) do no torch reductions;
- ``sys.stderr`` and the root logger are shared: :func:`wneurons.jobs.logged_to` filters log records by thread and
  redirects stderr only in a process of its own.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from types import CodeType, SimpleNamespace
from typing import Any


class JobCounter:
    """Jobs this process ran through :func:`run_script` (``started``) and how many of them raised (``failed``):
    what the closing line of a SLURM allocation reports (``snakemake_executor_plugin_wneurons_slurm.allocation``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = 0
        self.failed = 0

    def add(self, *, failed: bool = False) -> None:
        with self._lock:
            if failed:
                self.failed += 1
            else:
                self.started += 1


JOBS = JobCounter()


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the body with torch's intra-op thread count at ``n`` in the calling thread, the one the job computes
    in; the thread's previous count is restored after. Raises RuntimeError if torch does not take the count."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    if (got := torch.get_num_threads()) != n:
        raise RuntimeError(f"torch runs this job with {got} intra-op threads, not its {n}")
    try:
        yield
    finally:
        torch.set_num_threads(before)


@cache
def _compiled(path: str, stamp: tuple[int, int]) -> CodeType:
    # keyed by (mtime, size) as well: a script edited while a long run goes on is read again
    return compile(Path(path).read_text(), path, "exec")


def run_script(path: str | Path, **job: Any) -> None:
    """Execute the workflow script ``path`` in this process with ``snakemake`` bound to a namespace of ``job``'s
    fields (``input``, ``output``, ``params``, ``wildcards``, ``threads``, ``log``, ``config``): the same names a
    ``script:`` job sees. The script gets a fresh global namespace; nothing it defines outlives the job."""
    from wneurons.lm.models import import_transformers

    import_transformers()  # before any job's own imports: transformers' lazy names are not thread-safe
    path = str(Path(path).resolve())
    stat = Path(path).stat()
    namespace = {"__name__": "__wneurons_job__", "__file__": path, "snakemake": SimpleNamespace(**job)}
    JOBS.add()
    try:
        inject_fault(Path(path).name, job.get("wildcards") or {})
        exec(_compiled(path, (stat.st_mtime_ns, stat.st_size)), namespace)
    except BaseException:
        JOBS.add(failed=True)
        raise


def inject_fault(script: str, wildcards: Any) -> None:
    """Fault tests only (tests/workflow/test_slurm_faults.py), never set in a real run.

    ``WNEURONS_INJECT_DELAY=<seconds>:<file>``: every job waits that long first, until the file exists (so that a
    fault can strike while an allocation of the tiny test project still runs); with
    ``WNEURONS_INJECT_DELAY_ONLY=<script>``, only that script's jobs wait (tests/workflow/test_resume.py: a kill
    during a job that otherwise lasts less than the poll that looks for it).
    ``WNEURONS_INJECT_FAULT=<script>:<benchmark>:<marker>``: the first job of that script and benchmark raises, once
    (creating the marker file records it, atomically across processes).
    """
    if os.environ.get("WNEURONS_INJECT_DELAY"):
        seconds, until = os.environ["WNEURONS_INJECT_DELAY"].split(":", 1)
        only = os.environ.get("WNEURONS_INJECT_DELAY_ONLY")
        if not Path(until).exists() and only in (None, script):
            time.sleep(float(seconds))
    spec = os.environ.get("WNEURONS_INJECT_FAULT")
    if not spec:
        return
    name, benchmark, marker = spec.split(":", 2)
    if script == name and wildcards.get("benchmark") == benchmark:
        try:
            Path(marker).touch(exist_ok=False)
        except FileExistsError:
            return
        raise RuntimeError(f"injected fault (WNEURONS_INJECT_FAULT) in {script} {benchmark}")


def in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
