"""Jobs sharing one process: the model pool, the torch thread count, per-thread logs, scripts run in-process."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import torch

from wneurons.jobs import inprocess
from wneurons.jobs.base import logged_to
from wneurons.lm.ablation import clamp_negative_preactivations
from wneurons.lm.model_pool import ModelPool, leftover_hooks


def test_pool_lends_one_instance_per_job_and_reuses_it(tiny_model):
    pool, loads = ModelPool(max_idle=2), []

    def load():
        loads.append(1)
        return tiny_model("llama"), "tokenizer"

    with pool.checkout("llama", load) as first:
        with pool.checkout("llama", load) as second:  # a concurrent job: its own instance
            assert first[0] is not second[0]
    with pool.checkout("llama", load) as third:
        assert third[0] in (first[0], second[0])
    assert (pool.loads, pool.reuses, len(loads)) == (2, 1, 2)


def test_pool_keeps_at_most_max_idle_and_evicts_the_oldest(tiny_model):
    pool = ModelPool(max_idle=1)
    with pool.checkout("a", lambda: (tiny_model("llama"), None)):
        pass
    with pool.checkout("b", lambda: (tiny_model("gpt_neox"), None)):
        pass
    with pool.checkout("a", lambda: (tiny_model("llama"), None)):
        pass
    assert pool.loads == 3 and pool.reuses == 0  # "a" was evicted when "b" came back


def test_pool_refuses_a_model_given_back_with_hooks(tiny_model):
    pool = ModelPool()
    model = tiny_model("llama")
    with pytest.raises(RuntimeError, match="hooks on"):
        with pool.checkout("m", lambda: (model, None)) as (lent, _):
            lent.model.layers[0].mlp.gate_proj.register_forward_hook(lambda *a: None)
    assert leftover_hooks(model) and pool.loads == 1
    with pool.checkout("m", lambda: (tiny_model("llama"), None)) as (again, _):
        assert again is not model  # the hooked instance was never pooled


def test_pool_drops_the_instance_of_a_failed_job(tiny_model):
    pool = ModelPool()
    with pytest.raises(ValueError):
        with pool.checkout("m", lambda: (tiny_model("llama"), None)):
            raise ValueError("job failed")
    with pool.checkout("m", lambda: (tiny_model("llama"), None)):
        pass
    assert pool.loads == 2


def test_a_clamp_leaves_a_poolable_model(tiny_model):
    model = tiny_model("llama")
    with clamp_negative_preactivations(model, {0: torch.tensor([1, 2])}):
        assert leftover_hooks(model)
    assert leftover_hooks(model) == []


def test_torch_threads_sets_each_jobs_count_in_its_own_thread_beside_other_counts():
    seen, lock = [], threading.Lock()
    inside = threading.Barrier(4, timeout=60)  # all four jobs are inside torch_threads at once

    def job(n):
        torch.set_num_threads(3 - n)  # what the reused worker thread ran before: the other count
        with inprocess.torch_threads(n):
            inside.wait()
            with lock:
                seen.append((n, torch.get_num_threads()))
            inside.wait()  # every job has set its count before any looks again
            with lock:
                seen.append((n, torch.get_num_threads()))
        with lock:
            seen.append((3 - n, torch.get_num_threads()))  # the thread's own count again

    before = torch.get_num_threads()
    try:
        workers = [threading.Thread(target=job, args=(n,)) for n in (1, 2, 1, 2)]
        [w.start() for w in workers]
        [w.join() for w in workers]
    finally:
        torch.set_num_threads(before)
    assert len(seen) == 12 and all(n == got for n, got in seen), seen


def test_torch_threads_refuses_a_count_torch_does_not_take(monkeypatch):
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    with pytest.raises(RuntimeError, match="intra-op threads, not its"):
        with inprocess.torch_threads(torch.get_num_threads() + 1):
            pass


def test_logs_of_concurrent_jobs_stay_apart(tmp_path):
    log = logging.getLogger("wneurons.test")

    def job(name):
        with logged_to(tmp_path / f"{name}.log"):
            for i in range(20):
                log.info("%s line %d", name, i)
                time.sleep(0.001)

    workers = [threading.Thread(target=job, args=(n,)) for n in ("a", "b")]
    [w.start() for w in workers]
    [w.join() for w in workers]
    for name, other in (("a", "b"), ("b", "a")):
        text = (tmp_path / f"{name}.log").read_text()
        assert text.count(f"{name} line") == 20 and f"{other} line" not in text


def test_run_script_binds_the_job_and_isolates_globals(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("leak = 1\nopen(snakemake.output[0], 'w').write(str(snakemake.params['x'] * 2))\n")
    out = tmp_path / "out.txt"
    inprocess.run_script(script, output=[str(out)], params={"x": 21})
    assert out.read_text() == "42" and "leak" not in globals()
    script.write_text("raise ValueError('bad input in ' + snakemake.wildcards['model'])\n")
    with pytest.raises(ValueError, match="bad input in pythia"):
        inprocess.run_script(script, wildcards={"model": "pythia"})


def test_job_logs_say_which_checkouts_loaded_and_count_loads_reads_them(tmp_path, tiny_model):
    from wneurons.lm.model_pool import count_loads

    pool = ModelPool(max_idle=1)
    for name, key in (("a", "m1"), ("b", "m1"), ("c", "m2"), ("d", "m1")):  # m2 evicts m1: d loads it again
        with logged_to(tmp_path / f"{name}.log"):
            with pool.checkout((key, "main", "float32"), lambda: (tiny_model("llama"), None)):
                pass
    counts = count_loads(sorted(tmp_path.glob("*.log")))
    assert counts == {
        "('m1', 'main', 'float32')": {"loads": 2, "reuses": 1, "processes": 1, "max_per_process": 2},
        "('m2', 'main', 'float32')": {"loads": 1, "reuses": 0, "processes": 1, "max_per_process": 1},
    }
    assert (pool.loads, pool.reuses) == (3, 1)
