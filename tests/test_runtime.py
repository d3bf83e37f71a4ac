"""How a job runs its model: the precision (fp32 / tf32 / bf16) it is configured in and records, the device it is
given (and the one-line failure when a GPU was given but CUDA is unusable), and batches that halve on a CUDA
out-of-memory error (injected here: the forward raises it once), all without a GPU."""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml
from conftest import VOCAB, build_tiny_model

from wneurons.lm import model_pool, models
from wneurons.lm.activations import collect_activation_shards
from wneurons.lm.models import (
    PRECISIONS,
    DeviceSlots,
    DeviceUnavailableError,
    job_devices,
    matmul_precision,
    resolve_precision,
)
from wneurons.lm.perplexity import perplexity
from wneurons.lm.scoring import batched_logprob_sums, run_in_batches
from wneurons.store.shards import ShardIndex

SCHEMA = "workflow/schemas/config.schema.yaml"
OOM = "CUDA out of memory. Tried to allocate 2.00 GiB (injected by the test)"


# ---------------------------------------------------------------------------------------------------------------
# precision


@pytest.mark.parametrize(
    ("spelling", "name", "weights", "tf32"),
    [
        ("fp32", "fp32", torch.float32, False),
        ("float32", "fp32", torch.float32, False),
        ("tf32", "tf32", torch.float32, True),
        ("bf16", "bf16", torch.bfloat16, False),
        ("bfloat16", "bf16", torch.bfloat16, False),
    ],
)
def test_precisions_and_their_old_spellings(spelling, name, weights, tf32):
    precision = resolve_precision(spelling)
    assert (precision.name, precision.weights, precision.tf32) == (name, weights, tf32)


def test_unknown_precision_lists_the_valid_ones():
    with pytest.raises(ValueError, match="'float64' is not one of fp32, tf32, bf16"):
        resolve_precision("float64")


def test_the_schema_accepts_exactly_the_package_precisions():
    schema = yaml.safe_load(open(SCHEMA))["properties"]
    for stage in ("evaluation", "neurons"):
        dtype = schema[stage]["properties"]["dtype"]
        assert set(dtype["enum"]) == set(models.DTYPES) and dtype["default"] == "fp32"


@pytest.mark.parametrize("config", ["config/config.yaml", "config/demo.yaml", "config/replication-gemma3.yaml"])
def test_configs_name_their_precisions_by_the_new_names(config):
    data = yaml.safe_load(open(config))
    assert {data["evaluation"]["dtype"], data["neurons"]["dtype"]} <= set(PRECISIONS)


class _Switches:
    """A torch backend module that knows only the given attributes and raises on any other, as torch's do."""

    def __init__(self, **values):
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        if name not in self._values:
            raise AttributeError(f"unknown attribute {name}")
        self._values[name] = value


@pytest.mark.parametrize("torch_version", ["2.9+", "2.6-2.8"])
def test_tf32_is_switched_on_torch_with_and_without_fp32_precision(torch_version):
    if torch_version == "2.9+":
        matmul, conv = _Switches(fp32_precision="ieee"), _Switches(fp32_precision="ieee")
        backends = SimpleNamespace(cuda=SimpleNamespace(matmul=matmul), cudnn=SimpleNamespace(conv=conv))
        read = lambda: (matmul.fp32_precision, conv.fp32_precision)  # noqa: E731
        on, off = ("tf32", "tf32"), ("ieee", "ieee")
    else:  # no fp32_precision: only the allow_tf32 switches
        matmul, cudnn = _Switches(allow_tf32=False), _Switches(allow_tf32=False)
        backends = SimpleNamespace(cuda=SimpleNamespace(matmul=matmul), cudnn=cudnn)
        read = lambda: (matmul.allow_tf32, cudnn.allow_tf32)  # noqa: E731
        on, off = (True, True), (False, False)
    models._set_tf32(True, backends)
    assert read() == on
    models._set_tf32(False, backends)
    assert read() == off


def test_matmul_precision_sets_nothing_on_the_cpu(monkeypatch):
    calls = []
    monkeypatch.setattr(models, "_set_tf32", calls.append)
    with matmul_precision("tf32", "cpu"):
        pass
    assert calls == []


def test_matmul_precision_switches_tf32_per_job_and_never_under_a_running_job(monkeypatch):
    """Two jobs wanting TF32 share the switch; a fp32 job waits until they are done, then turns it off."""
    calls = []
    monkeypatch.setattr(models, "_set_tf32", calls.append)
    entered = threading.Event()
    order = []

    def fp32_job():
        entered.wait()
        with matmul_precision("fp32", "cuda:1"):
            order.append("fp32 ran")

    thread = threading.Thread(target=fp32_job)
    thread.start()
    with matmul_precision("tf32", "cuda:0"), matmul_precision(PRECISIONS["tf32"], "cuda:1"):
        entered.set()
        time.sleep(0.2)  # the fp32 job is waiting now
        order.append("tf32 done")
    thread.join(timeout=10)
    assert order == ["tf32 done", "fp32 ran"]
    assert calls == [True, False]


def _saved_tiny(tmp_path):
    from test_models import _tiny_tokenizer

    build_tiny_model("llama").save_pretrained(tmp_path / "tiny")
    _tiny_tokenizer().save_pretrained(tmp_path / "tiny")
    return {"name": "tiny", "local_path": str(tmp_path / "tiny"), "num_layers": 3, "revision": "main"}


@pytest.mark.parametrize(("dtype", "weights"), [("tf32", torch.float32), ("bf16", torch.bfloat16)])
def test_the_loaded_model_carries_its_precision_into_provenance(tmp_path, dtype, weights):
    from wneurons.jobs.base import load_configured_model, model_provenance

    spec = _saved_tiny(tmp_path)
    model, _ = load_configured_model(spec, dtype)
    assert {p.dtype for p in model.parameters()} == {weights}
    prov = model_provenance(spec, model)
    assert (prov["precision"], prov["device"], prov["device_name"]) == (dtype, "cpu", "cpu")


def test_bf16_scores_keep_float32_log_softmax(tiny_model):
    """bf16 weights, float32 log-sum-exp: sums stay float64 and close to the float32 model's."""
    model = tiny_model("llama")
    flat, offsets = _sentences(12)
    fp32 = batched_logprob_sums(model, flat, offsets, batch_size=4, progress=None)
    bf16 = batched_logprob_sums(model.to(torch.bfloat16), flat, offsets, batch_size=4, progress=None)
    assert bf16.dtype == np.float64
    np.testing.assert_allclose(bf16, fp32, rtol=0.05)
    assert not np.array_equal(bf16, fp32)


# ---------------------------------------------------------------------------------------------------------------
# devices


def test_no_gpu_given_and_none_visible_runs_on_the_cpu():
    assert job_devices({}, cuda_available=False, device_count=0) == ["cpu"]
    assert job_devices({"CUDA_VISIBLE_DEVICES": ""}, False, 0) == ["cpu"]
    assert job_devices({"SLURM_GPUS_ON_NODE": "0"}, False, 0) == ["cpu"]


@pytest.mark.parametrize(
    "env",
    [
        {"CUDA_VISIBLE_DEVICES": "0"},
        {"SLURM_JOB_GPUS": "3"},
        {"SLURM_STEP_GPUS": "0,1"},
        {"WNEURONS_DEVICE": "cuda"},
        {"WNEURONS_DEVICE": "cuda:1"},
    ],
)
def test_a_job_given_a_gpu_fails_at_once_when_cuda_is_unusable(env):
    with pytest.raises(DeviceUnavailableError) as info:
        job_devices(env, cuda_available=False, device_count=0, reason=lambda: "torch 2.13.0+cpu is a CPU-only build")
    message = str(info.value)
    assert "\n" not in message
    name, value = next(iter(env.items()))
    assert f"{name}={value}" in message and "CPU-only build" in message and "WNEURONS_DEVICE=cpu" in message


def test_wneurons_device_cpu_runs_a_gpu_job_on_the_cpu_only_where_the_gpu_cannot_be_used():
    env = {"CUDA_VISIBLE_DEVICES": "0", "SLURM_JOB_GPUS": "0", "WNEURONS_DEVICE": "cpu"}
    assert job_devices(env, cuda_available=False, device_count=0) == ["cpu"]  # stand-in GPUs (CI)
    assert job_devices({"WNEURONS_DEVICE": "cpu"}, cuda_available=True, device_count=1) == ["cpu"]  # none given
    # A real GPU given and usable: a value left in the login shell (sbatch --export=ALL) must not silently turn the
    # allocation into a CPU run.
    with pytest.raises(DeviceUnavailableError, match="WNEURONS_DEVICE=cpu, but this job was given a GPU") as info:
        job_devices(env, cuda_available=True, device_count=1)
    assert "\n" not in str(info.value) and "unset WNEURONS_DEVICE" in str(info.value)


def test_every_visible_gpu_is_a_slot():
    assert job_devices({"CUDA_VISIBLE_DEVICES": "2,3,5"}, True, 3) == ["cuda:0", "cuda:1", "cuda:2"]
    assert job_devices({}, True, 2) == ["cuda:0", "cuda:1"]
    assert job_devices({"WNEURONS_DEVICE": "cuda:1"}, True, 2) == ["cuda:1"]
    with pytest.raises(DeviceUnavailableError, match="cuda:4"):
        job_devices({"WNEURONS_DEVICE": "cuda:4"}, True, 2)


def _hold_slots(slots: DeviceSlots, n_jobs: int, hold_s: float) -> list[tuple[str, float, float]]:
    taken = []
    lock = threading.Lock()

    def job():
        with slots.slot() as device:
            start = time.perf_counter()
            time.sleep(hold_s)
            with lock:
                taken.append((device, start, time.perf_counter()))

    threads = [threading.Thread(target=job) for _ in range(n_jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return taken


def test_concurrent_jobs_get_different_gpus_and_a_third_waits():
    taken = _hold_slots(DeviceSlots(["cuda:0", "cuda:1"]), n_jobs=3, hold_s=0.3)
    assert sorted(d for d, _, _ in taken) in (["cuda:0", "cuda:0", "cuda:1"], ["cuda:0", "cuda:1", "cuda:1"])
    for i, (device, start, end) in enumerate(taken):
        for other, o_start, o_end in taken[i + 1 :]:
            if device == other:  # the same GPU is never held by two jobs at once
                assert end <= o_start or o_end <= start


def test_the_cpu_is_shared_by_every_job():
    taken = _hold_slots(DeviceSlots(["cpu"]), n_jobs=3, hold_s=0.3)
    starts, ends = [s for _, s, _ in taken], [e for _, _, e in taken]
    assert max(starts) < min(ends)  # all three ran at once


def test_configured_model_gives_concurrent_jobs_their_own_gpu_and_pool_key(monkeypatch):
    """Two GPUs visible (torch.cuda monkeypatched): two concurrent jobs of one model load two instances, one on
    cuda:0 and one on cuda:1, and the pool keys them by device."""
    from wneurons.jobs import base

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(models, "_set_tf32", lambda on: None)
    monkeypatch.delenv("WNEURONS_DEVICE", raising=False)
    monkeypatch.setattr(model_pool, "POOL", model_pool.ModelPool())
    loaded = []

    def fake_load(spec, dtype, device):
        loaded.append((dtype, device))
        return build_tiny_model("llama"), None

    monkeypatch.setattr(base, "load_configured_model", fake_load)
    spec = {"name": "tiny", "local_path": "/nowhere", "num_layers": 3, "revision": "main"}
    both_in = threading.Barrier(2, timeout=10)

    def job():
        with base.configured_model(spec, "tf32"):
            both_in.wait()

    threads = [threading.Thread(target=job) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(loaded) == [("tf32", "cuda:0"), ("tf32", "cuda:1")]
    keys = sorted(key for key, _ in model_pool.POOL._idle.values())
    assert [key[-2:] for key in keys] == [("tf32", "cuda:0"), ("tf32", "cuda:1")]


def test_configured_model_fails_before_loading_when_the_given_gpu_is_unusable(monkeypatch):
    from wneurons.jobs import base

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.delenv("WNEURONS_DEVICE", raising=False)
    monkeypatch.setattr(base, "load_configured_model", lambda *a: pytest.fail("loaded a model"))
    spec = {"name": "tiny", "local_path": "/nowhere", "num_layers": 3, "revision": "main"}
    with pytest.raises(DeviceUnavailableError, match="CUDA_VISIBLE_DEVICES=0"), base.configured_model(spec, "fp32"):
        pass


# ---------------------------------------------------------------------------------------------------------------
# CUDA out of memory: the batch halves and the job goes on


def _sentences(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 12, n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return rng.integers(3, VOCAB, int(offsets[-1])), offsets


def _raise_once(module: torch.nn.Module, monkeypatch) -> list[int]:
    """Make ``module``'s first forward raise a CUDA OOM; returns the row count of every forward it was called
    with (a row holds one or several sequences: minimal-pair scoring packs prefix trees)."""
    forward = module.forward
    seen = []

    def flaky(*args, **kwargs):
        seen.append((kwargs.get("input_ids") if "input_ids" in kwargs else args[0]).shape[0])
        if len(seen) == 1:
            raise torch.cuda.OutOfMemoryError(OOM)
        return forward(*args, **kwargs)

    monkeypatch.setattr(module, "forward", flaky)
    return seen


def test_run_in_batches_halves_then_keeps_the_smaller_batch(caplog):
    ranges = []

    def step(lo, hi):
        if hi - lo > 4:
            raise torch.cuda.OutOfMemoryError(OOM)
        ranges.append((lo, hi))

    with caplog.at_level(logging.WARNING, logger="wneurons.lm.scoring"):
        assert run_in_batches(10, 8, step) == 4
    assert ranges == [(0, 4), (4, 8), (8, 10)]
    assert [r.getMessage() for r in caplog.records] == ["CUDA out of memory at batch 8: retrying at 4"]


def test_an_oom_at_one_item_is_raised():
    def step(lo, hi):
        raise torch.cuda.OutOfMemoryError(OOM)

    with pytest.raises(torch.cuda.OutOfMemoryError):
        run_in_batches(3, 4, step)


def test_scoring_retries_an_oom_at_half_the_batch_with_the_same_numbers(tiny_model, monkeypatch, caplog):
    model = tiny_model("llama")
    flat, offsets = _sentences(16)
    expected = batched_logprob_sums(model, flat, offsets, batch_size=4, progress=None)
    seen = _raise_once(model, monkeypatch)
    with caplog.at_level(logging.WARNING):
        got = batched_logprob_sums(model, flat, offsets, batch_size=8, progress=None)
    assert "CUDA out of memory at batch 8: retrying at 4" in caplog.text
    assert len(seen) == 1 + 16 // 4  # the failed batch of 8, then 4 batches of 4
    np.testing.assert_array_equal(got, expected)


class _Ids:
    """A stand-in tokenizer: the text is the token ids, written out with spaces."""

    bos_token_id = 1

    def __call__(self, text, **_):
        return {"input_ids": [int(t) for t in text.split()]}


def test_perplexity_retries_an_oom_at_half_the_batch_with_the_same_numbers(tiny_model, monkeypatch, caplog):
    model = tiny_model("llama")
    text = " ".join(map(str, np.random.default_rng(1).integers(3, VOCAB, 8 * 16)))
    kwargs = dict(convention="no-special-tokens", window=16)
    expected = perplexity(model, _Ids(), text, batch_size=2, **kwargs)
    _raise_once(model, monkeypatch)
    with caplog.at_level(logging.WARNING):
        got = perplexity(model, _Ids(), text, batch_size=4, **kwargs)
    assert "CUDA out of memory at batch 4: retrying at 2" in caplog.text
    assert got == expected


def test_collection_retries_an_oom_mid_forward_and_writes_the_same_shards(tiny_model, tmp_path, monkeypatch, caplog):
    """The OOM comes after the first layer's hook already queued its block: the retried range rewrites it."""
    from test_activations import TEXT, WINDOW, CharTokenizer

    model = tiny_model("llama")
    kwargs = dict(window=WINDOW, md_tokens=40, seed=2, dtype="float32")
    collect_activation_shards(model, CharTokenizer(), TEXT, tmp_path / "expected", batch_size=2, **kwargs)
    layer = model.model.layers[1]
    calls = []

    def oom_once(module, args):
        calls.append(args[0].shape[0])
        if len(calls) == 1:
            raise torch.cuda.OutOfMemoryError(OOM)

    handle = layer.register_forward_pre_hook(oom_once)
    try:
        with caplog.at_level(logging.WARNING):
            collect_activation_shards(model, CharTokenizer(), TEXT, tmp_path / "got", batch_size=4, **kwargs)
    finally:
        handle.remove()
    assert "CUDA out of memory at batch 4: retrying at 2" in caplog.text
    assert calls[:2] == [4, 2]
    expected, got = ShardIndex.load(tmp_path / "expected"), ShardIndex.load(tmp_path / "got")
    for i in range(expected.n_layers):
        np.testing.assert_array_equal(got.y(i), expected.y(i))
        np.testing.assert_array_equal(got.x_md(i), expected.x_md(i))
