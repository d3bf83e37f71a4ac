"""Loaded models kept between the jobs of one process (see :mod:`wneurons.jobs.inprocess`).

A job checks a model out for its whole run and gives it back; the next job of the same (source, revision, dtype,
device) gets the same instance without loading it again. A checked-out instance belongs to one job: two jobs that
run at once on the same model get two instances, so one job's clamp hooks never touch another's forward. Idle
instances are kept up to ``max_idle`` (least recently used evicted first): enough for the jobs a process runs at once,
never "every model of the grid in memory".

An instance is given back only in the state it was lent: in eval mode and with no forward hook or pre-hook left on
any module (the ablation and collection hooks are context managers that remove themselves). Anything else is a bug
in a job, reported as an error instead of leaking into the next job's numbers.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)

# Idle instances kept per process: one per job slot of a 2-core CPU run, or the one GPU job of a SLURM group.
DEFAULT_MAX_IDLE = int(os.environ.get("WNEURONS_MAX_IDLE_MODELS", "2"))


def leftover_hooks(model: Any) -> list[str]:
    """Names of the modules of ``model`` that still carry a forward hook or pre-hook."""
    return [name for name, m in model.named_modules() if m._forward_hooks or m._forward_pre_hooks]


class ModelPool:
    def __init__(self, max_idle: int = DEFAULT_MAX_IDLE):
        if max_idle < 0:
            raise ValueError(f"max_idle must be >= 0, got {max_idle}")
        self.max_idle = max_idle
        self._lock = threading.Lock()
        self._idle: OrderedDict[int, tuple[Hashable, Any]] = OrderedDict()
        self.loads = 0  # instances loaded by this pool: what docs/performance.md counts
        self.reuses = 0

    @contextmanager
    def checkout(self, key: Hashable, load: Callable[[], Any]) -> Iterator[Any]:
        """Lend an idle instance for ``key`` or load one with ``load()`` (which returns ``(model, tokenizer)``)."""
        with self._lock:
            slot = next((s for s, (k, _) in reversed(self._idle.items()) if k == key), None)
            value = self._idle.pop(slot)[1] if slot is not None else None
        if value is None:
            start = time.perf_counter()
            value = load()
            with self._lock:
                self.loads += 1
                loads = self.loads
            # One line per load in the job's log: `perf/model_loads.py` counts these to measure loads of a run.
            seconds = time.perf_counter() - start
            log.info("model %s loaded in %.1f s (load %d of process %d)", key, seconds, loads, os.getpid())
        else:
            with self._lock:
                self.reuses += 1
            log.info("model %s reused from this process's pool (no load; process %d)", key, os.getpid())
        yield value
        model = value[0]
        hooks = leftover_hooks(model)
        if hooks or model.training:
            raise RuntimeError(
                f"a job gave back model {key} with hooks on {hooks[:3]} (of {len(hooks)}) / training={model.training}:"
                " it is not pooled; every hook must be removed by the job that set it"
            )
        with self._lock:
            self._idle[id(value)] = (key, value)
            while len(self._idle) > self.max_idle:
                self._idle.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._idle.clear()


POOL = ModelPool()

_LOADED = re.compile(r"model (?P<key>\(.*\)) loaded in [0-9.]+ s \(load [0-9]+ of process (?P<pid>[0-9]+)\)")
_REUSED = re.compile(r"model (?P<key>\(.*\)) reused from this process's pool(?: \(no load; process (?P<pid>[0-9]+)\))?")
# The closing line of a SLURM allocation (snakemake_executor_plugin_wneurons_slurm.allocation).
_ALLOCATION = re.compile(
    r"wneurons allocation (?P<jobid>\S+) \((?P<group>.*)\): (?P<jobs>[0-9]+) jobs ran in process (?P<pid>[0-9]+), "
    r"(?P<failed>[0-9]+) failed; (?P<loads>[0-9]+) model loads, (?P<reuses>[0-9]+) reuses"
)


def count_loads(log_files: Iterable[str | os.PathLike]) -> dict[str, dict[str, int]]:
    """Loads and reuses per model key, read from job logs (the lines :meth:`ModelPool.checkout` writes), with the
    number of distinct processes that loaded each and the most loads one process paid for it (``max_per_process``;
    with jobs in threads of one process that is the number of concurrent jobs on the model, not its jobs)."""
    loads: dict[str, list[str]] = {}  # key -> pid of each load
    reuses: dict[str, int] = {}
    for path in log_files:
        with open(path, errors="replace") as fh:
            for line in fh:
                if m := _LOADED.search(line):
                    loads.setdefault(m["key"], []).append(m["pid"])
                elif m := _REUSED.search(line):
                    reuses[m["key"]] = reuses.get(m["key"], 0) + 1
    return {
        key: {
            "loads": len(loads.get(key, ())),
            "reuses": reuses.get(key, 0),
            "processes": len(set(loads.get(key, ()))),
            "max_per_process": max((loads[key].count(p) for p in set(loads.get(key, ()))), default=0),
        }
        for key in loads.keys() | reuses.keys()
    }


def count_allocations(log_files: Iterable[str | os.PathLike]) -> list[dict[str, int | str]]:
    """The closing line of every SLURM allocation log among ``log_files``: its job id, group, jobs run (and failed)
    and the model loads and reuses they paid, one dict per allocation in file order."""
    rows = []
    for path in log_files:
        with open(path, errors="replace") as fh:
            for line in fh:
                if m := _ALLOCATION.search(line):
                    row = m.groupdict()
                    rows.append({k: v if k in ("jobid", "group") else int(v) for k, v in row.items()})
    return rows
