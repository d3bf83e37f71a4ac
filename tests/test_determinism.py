"""Bitwise results whatever runs beside a job: jobs in threads of one process (wneurons.jobs.inprocess).

torch's intra-op thread count decides how float32 reductions are split, so it changes the last bits of a score.
With the OpenMP backend the count is a setting of each OS thread, and Snakemake's worker threads are reused from
job to job: a job must set its own count in its own thread, whatever the thread ran before and whatever runs
beside it. Here the same items are scored serially and as concurrent jobs (two worker threads in lockstep, batch
by batch) of equal and of different thread counts, and every result must equal the serial one byte for byte.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from wneurons.jobs import inprocess
from wneurons.lm.scoring import batched_logprob_sums

# Token-id sequences of the tiny vocabulary, 5 to 59 tokens long, scored in batches of one sequence.
_RNG = np.random.default_rng(28)
_LENGTHS = _RNG.integers(5, 60, 24)
OFFSETS = np.concatenate([[0], np.cumsum(_LENGTHS)])
TOKENS = _RNG.integers(3, 200, int(OFFSETS[-1]))
# Whether the tiny model's small matmuls split by the thread count depends on the CPU (MKL picks its kernels by
# instruction set: on some machines 1 and 2 threads give the same scores). ATen's float32 sum of a long vector
# splits by the thread count on every CPU, so each job also sums one of these after every batch, in its own
# thread: the premise below then holds everywhere and the concurrency test can always fail.
PROBES = torch.from_numpy(_RNG.standard_normal((8, 100_000)).astype(np.float32))
COUNTS = (1, 2)
# Two jobs side by side per round, as Snakemake's thread pool runs them. The first round leaves both worker
# threads at 2 threads; the later rounds reuse those threads for jobs of 1 thread, then mix the counts.
ROUNDS = [(2, 2), (1, 1), (1, 2), (2, 1), (1, 1), (2, 2)]


def score_job(model, threads: int, step=None) -> tuple[np.ndarray, np.ndarray, set[int]]:
    """Log-prob sums of every sequence scored as a job of ``threads`` threads, the float32 probe sums it computed
    after each batch, and the thread counts torch reported in this OS thread after each batch."""
    seen: set[int] = set()
    probes: list[torch.Tensor] = []

    def progress(done: int, total: int) -> None:
        seen.add(torch.get_num_threads())
        probes.append(PROBES[done % len(PROBES)].sum())
        if step is not None:
            step()

    with inprocess.torch_threads(threads):
        sums = batched_logprob_sums(model, TOKENS, OFFSETS, batch_size=1, progress=progress)
    return sums, torch.stack(probes).numpy(), seen


@pytest.fixture(scope="module")
def serial():
    """The tiny Llama and its scores per thread count, each job run alone in a fresh thread."""
    from conftest import build_tiny_model

    model = build_tiny_model("llama")
    scores, probes = {}, {}
    for n in COUNTS:
        with ThreadPoolExecutor(1) as pool:
            scores[n], probes[n], seen = pool.submit(score_job, model, n).result()
        assert seen == {n}
    return model, scores, probes


def test_the_thread_count_changes_the_bits(serial):
    """The premise: without it the concurrency test below could not fail. The scores themselves agree to
    float32 rounding whatever the count (on some CPUs bit for bit)."""
    _, scores, probes = serial
    assert probes[1].tobytes() != probes[2].tobytes()
    np.testing.assert_allclose(probes[1], probes[2], rtol=0, atol=1e-2)
    np.testing.assert_allclose(scores[1], scores[2], rtol=0, atol=1e-4)


def test_concurrent_jobs_of_equal_and_different_counts_give_the_serial_bytes(serial):
    model, scores, probes = serial
    with ThreadPoolExecutor(2) as pool:
        for counts in ROUNDS:
            # Both jobs wait for each other after every batch: they compute side by side the whole time. A
            # mechanism that runs them one after the other breaks the barrier (timeout) instead of hanging.
            lockstep = threading.Barrier(len(counts), timeout=60)
            jobs = [pool.submit(score_job, model, n, lockstep.wait) for n in counts]
            for n, job in zip(counts, jobs, strict=True):
                sums, probe, seen = job.result()
                assert seen == {n}, f"round {counts}: a {n}-thread job computed with {seen} threads"
                assert probe.tobytes() == probes[n].tobytes(), (
                    f"round {counts}: a {n}-thread job beside another summed its probes with other bits"
                )
                assert sums.tobytes() == scores[n].tobytes(), (
                    f"round {counts}: a {n}-thread job beside another differs from its serial run by up to "
                    f"{np.abs(sums - scores[n]).max():.3g} nats"
                )


def matched_search_record(model, threads: int) -> bytes:
    """The matched search's JSON record (issue 44: 12.8401% vs 12.8576% from one config) run as a job of
    ``threads`` threads: the search's own code (core.selection) over the clamp and a perplexity of fixed windows
    of the tiny vocabulary, as matched_search_job runs it."""
    import math

    import polars as pl

    from wneurons.core.selection import perplexity_matched_fraction, select_neurons
    from wneurons.lm.ablation import clamp_negative_preactivations

    rng = np.random.default_rng(44)
    layers = list(range(3))
    width = model.config.intermediate_size
    stats = pl.DataFrame({"layer": np.repeat(layers, width), "neuron": np.tile(np.arange(width), 3),
                          "wd": rng.random(3 * width)})  # fmt: skip
    windows = torch.from_numpy(rng.integers(3, 200, (4, 48)))

    def perplexity_of(selector: str, percent: float) -> float:
        neurons = select_neurons(stats, selector, percent, layers) if percent > 0 else {}
        with clamp_negative_preactivations(model, neurons), torch.inference_mode():
            logits = model(input_ids=windows[:, :-1], use_cache=False).logits
            nll = -torch.log_softmax(logits, -1).gather(-1, windows[:, 1:, None])
        return math.exp(float(nll.double().mean()))

    with inprocess.torch_threads(threads):
        # A random tiny model predicts about uniformly (perplexity ~ 200 whatever is clamped), so the target sits
        # between clean and the bracket's top and the tolerance is tiny: the search then takes all its steps, and
        # its m% rest on differences of ~1e-4 in perplexity, where float32 rounding would show.
        clean, top = perplexity_of("lowest", 0.0), perplexity_of("lowest", 95.0)
        result = perplexity_matched_fraction(
            lambda m: perplexity_of("lowest", m),
            math.sqrt(clean * top),
            clean=clean,
            tolerance=1e-9,
            nll_increase_tolerance=1e-9,
            max_steps=8,
        )
    return json.dumps(result, sort_keys=True).encode()


def test_the_matched_search_gives_the_same_bytes_twice_and_at_1_and_2_threads(serial):
    """Started twice on the same inputs the search must write the same record, and the thread count must not
    change it either (float32 reductions split by threads would move the interpolated m% between starts)."""
    model = serial[0]
    once = matched_search_record(model, 1)
    assert len(json.loads(once)["trace"]) > 2  # it searched: several evaluations to compare, not one
    assert matched_search_record(model, 1) == once
    assert matched_search_record(model, 2) == once
