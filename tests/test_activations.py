"""Activation shards: written values equal a direct forward pass; failures leave nothing; the stats pass reads them."""

from __future__ import annotations

import itertools
import json
import os

import numpy as np
import polars as pl
import pytest
import torch

from wneurons.core import stats
from wneurons.lm import registry
from wneurons.lm.activations import collect_activation_shards
from wneurons.store import shards
from wneurons.store.shards import ShardIndex

WINDOW = 16
TEXT = "The keys to the cabinet are on the table, and the dogs that bark never bite. " * 6


class CharTokenizer:
    """One token per character, ids inside the tiny vocabulary (200); enough to drive the collector."""

    bos_token_id = 1  # the tiny models' BOS (tests/conftest.py)

    def __call__(self, text: str, add_special_tokens: bool = True, verbose: bool = True) -> dict:
        assert not add_special_tokens, "the collector must not add special tokens"
        return {"input_ids": [3 + ord(ch) % 190 for ch in text]}


def load_layer(shard_dir, layer: int) -> tuple[np.ndarray, np.ndarray]:
    """``(y [N, K], x_md [md_tokens, d_in])`` of one layer, through the shard store's reader."""
    index = ShardIndex.load(shard_dir)
    return index.y(layer), index.x_md(layer)


def _direct_forward(
    model, ids: list[int], n_windows: int, bos: int | None = None
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per layer, the projection outputs [N, K] and inputs [N, d_in] from a plain full forward with own hooks;
    with ``bos`` every window is fed after it and the BOS position's outputs are left out."""
    modules = registry.preactivation_modules(model)
    ys, xs = [[] for _ in modules], [[] for _ in modules]

    def record(layer):
        def hook(module, args, out):
            skip = 0 if bos is None else 1
            ys[layer].append(out[:, skip:])
            xs[layer].append(args[0][:, skip:])

        return hook

    handles = [m.register_forward_hook(record(i)) for i, m in enumerate(modules)]
    windows = torch.tensor(ids[: n_windows * WINDOW]).reshape(n_windows, WINDOW)
    with torch.inference_mode():
        for w in windows:
            model(input_ids=w[None] if bos is None else torch.cat([torch.tensor([bos]), w])[None])
    for h in handles:
        h.remove()
    flat = lambda parts: torch.cat([p.reshape(-1, p.shape[-1]) for p in parts])  # noqa: E731
    return [flat(p) for p in ys], [flat(p) for p in xs]


@pytest.mark.parametrize("family", ["llama", "gpt2", "opt", "gpt_neox"])
def test_shards_equal_a_direct_forward(tiny_model, tmp_path, family):
    model = tiny_model(family)
    out = tmp_path / "shards"
    meta = collect_activation_shards(
        model, CharTokenizer(), TEXT, out, window=WINDOW, batch_size=2, md_tokens=40, seed=3, dtype="float32"
    )
    ids = CharTokenizer()(TEXT, add_special_tokens=False)["input_ids"]
    n_windows = len(ids) // WINDOW
    assert meta["n_tokens"] == n_windows * WINDOW and meta["text_tokens"] == len(ids)
    assert json.loads((out / "index.json").read_text())["md_positions"] == meta["md_positions"]
    index = ShardIndex.load(out)
    assert index.n_layers == len(registry.preactivation_modules(model))
    ys, xs = _direct_forward(model, ids, n_windows)
    positions = index.md_positions
    assert len(set(positions.tolist())) == 40
    np.testing.assert_array_equal(positions, np.random.default_rng(3).choice(meta["n_tokens"], 40, replace=False))
    for layer in range(index.n_layers):
        y, x_md = load_layer(out, layer)
        torch.testing.assert_close(torch.from_numpy(np.array(y)), ys[layer], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(torch.from_numpy(np.array(x_md)), xs[layer][positions], rtol=1e-5, atol=1e-6)


def test_window_bos_feeds_a_bos_per_window_and_stores_only_the_text(tiny_model, tmp_path):
    model = tiny_model("llama")
    tok = CharTokenizer()
    with_bos = collect_activation_shards(
        model, tok, TEXT, tmp_path / "b", window=WINDOW, batch_size=2, md_tokens=40, dtype="float32", window_bos=True
    )
    without = collect_activation_shards(model, tok, TEXT, tmp_path / "n", window=WINDOW, md_tokens=40, dtype="float32")
    assert with_bos["window_bos"] and with_bos["window_bos_token"] == 1 and not without["window_bos"]
    assert with_bos["n_tokens"] == without["n_tokens"]  # the BOS positions are not stored
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    ys, xs = _direct_forward(model, ids, with_bos["n_windows"], bos=1)
    positions = ShardIndex.load(tmp_path / "b").md_positions
    for layer in range(len(ys)):
        y, x_md = load_layer(tmp_path / "b", layer)
        torch.testing.assert_close(torch.from_numpy(np.array(y)), ys[layer], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(torch.from_numpy(np.array(x_md)), xs[layer][positions], rtol=1e-5, atol=1e-6)
    # The BOS changes what the model computes for the text (attention sees it), so the shards differ.
    assert not np.allclose(load_layer(tmp_path / "b", 1)[0], load_layer(tmp_path / "n", 1)[0])


def test_window_bos_refuses_a_window_past_the_context(tiny_model, tmp_path):
    model = tiny_model("llama")  # context 128
    with pytest.raises(ValueError, match="window 128 \\+ its BOS exceeds the context of 128"):
        collect_activation_shards(
            model, CharTokenizer(), TEXT * 3, tmp_path / "s", window=128, md_tokens=10, window_bos=True
        )


def test_max_tokens_whole_windows_and_float16(tiny_model, tmp_path):
    model = tiny_model("llama")
    meta = collect_activation_shards(
        model, CharTokenizer(), TEXT, tmp_path / "s", window=WINDOW, max_tokens=3 * WINDOW + 5, md_tokens=10
    )
    assert meta["n_tokens"] == 3 * WINDOW and meta["dtype"] == "float16"
    index = ShardIndex.load(tmp_path / "s")
    y = index.y(0)
    assert y.dtype == np.float16 and y.shape == (3 * WINDOW, 96)
    ys, _ = _direct_forward(model, CharTokenizer()(TEXT, add_special_tokens=False)["input_ids"], 3)
    torch.testing.assert_close(torch.from_numpy(y.astype(np.float32)), ys[0], rtol=1e-3, atol=1e-4)


def test_neuron_chunks_read_across_window_blocks(tiny_model, tmp_path):
    # Written two windows per batch, read back neuron-major in chunks that do not align with anything.
    model = tiny_model("gpt_neox")
    meta = collect_activation_shards(
        model, CharTokenizer(), TEXT, tmp_path / "s", window=WINDOW, batch_size=2, md_tokens=10, dtype="float32"
    )
    index = ShardIndex.load(tmp_path / "s")
    assert index.y_blocks(1).shape == (meta["n_windows"], 96, WINDOW)
    y = index.y(1)
    for start, stop in [(0, 1), (5, 38), (90, 96)]:
        np.testing.assert_array_equal(index.y_neurons(1, start, stop), y[:, start:stop].T)
    with pytest.raises(IndexError, match="no shards for layer 7"):
        index.y_neurons(7, 0, 1)


def test_shards_of_an_older_format_are_refused_with_the_fix(tiny_model, tmp_path):
    out = tmp_path / "s"
    collect_activation_shards(tiny_model("llama"), CharTokenizer(), TEXT, out, window=WINDOW, md_tokens=10)
    meta = json.loads((out / "index.json").read_text())
    (out / "index.json").write_text(json.dumps({**meta, "format": 1}))
    with pytest.raises(ValueError, match=r"shard format 1, this package reads 2; remove .* and collect again"):
        ShardIndex.load(out)


def test_failure_mid_collect_leaves_no_directory(tiny_model, tmp_path):
    model = tiny_model("llama")
    calls = []

    def fail_on_third_window(module, args, out):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("simulated crash")

    registry.preactivation_modules(model)[1].register_forward_hook(fail_on_third_window)
    out = tmp_path / "shards"
    with pytest.raises(RuntimeError, match="simulated crash"):
        collect_activation_shards(model, CharTokenizer(), TEXT, out, window=WINDOW, md_tokens=10)
    assert len(calls) == 3
    assert list(tmp_path.iterdir()) == []
    # the collector's hooks are gone, the test's own remains
    assert [len(m._forward_hooks) for m in registry.preactivation_modules(model)] == [0, 1, 0]


def test_nan_activation_names_model_and_layer(tiny_model, tmp_path):
    model = tiny_model("llama")
    registry.preactivation_modules(model)[2].register_forward_hook(lambda m, a, out: out * float("nan"))
    with pytest.raises(FloatingPointError, match="tiny-llama: layer 2"):
        collect_activation_shards(
            model, CharTokenizer(), TEXT, tmp_path / "s", window=WINDOW, md_tokens=10, model_name="tiny-llama"
        )
    assert list(tmp_path.iterdir()) == []


def test_float16_overflow_is_an_error(tiny_model, tmp_path):
    model = tiny_model("llama")
    registry.preactivation_modules(model)[1].register_forward_hook(lambda m, a, out: out * 1e6)
    with pytest.raises(OverflowError, match="layer 1.*float32"):
        collect_activation_shards(model, CharTokenizer(), TEXT, tmp_path / "s", window=WINDOW, md_tokens=10)


def test_too_short_text_and_bad_arguments(tiny_model, tmp_path):
    model = tiny_model("llama")
    with pytest.raises(ValueError, match="at least one window"):
        collect_activation_shards(model, CharTokenizer(), "short", tmp_path / "s", window=WINDOW)
    with pytest.raises(ValueError, match="md_tokens"):
        collect_activation_shards(model, CharTokenizer(), TEXT, tmp_path / "s", window=WINDOW, md_tokens=10**6)
    with pytest.raises(ValueError, match="dtype"):
        collect_activation_shards(model, CharTokenizer(), TEXT, tmp_path / "s", window=WINDOW, dtype="int8")
    with pytest.raises(FileNotFoundError, match="no index.json"):
        ShardIndex.load(tmp_path)


def test_neuron_statistics_table_from_shards(tiny_model, tmp_path):
    model = tiny_model("llama")
    out = tmp_path / "shards"
    collect_activation_shards(model, CharTokenizer(), TEXT, out, window=WINDOW, md_tokens=40, dtype="float32")
    table = stats.neuron_statistics(out, wd_method="both", md_pairs=15, seed=5, chunk_neurons=7)
    index = ShardIndex.load(out)
    assert table.height == 3 * 96
    assert table["layer"].to_list() == np.repeat(np.arange(3), 96).tolist()
    expected_columns = {"layer", "neuron", "wd", "wd_negative", "wd_positive", "frac_negative", "mean", "std"}
    assert expected_columns | {"skewness", "kurtosis", "md", "constant", "wd_sampled"} == set(table.columns)
    for layer in range(3):
        y = np.asarray(index.y(layer))
        rows = table.filter(pl.col("layer") == layer)
        np.testing.assert_allclose(rows["wd"].to_numpy(), stats.wasserstein_distance_to_normal(y).numpy())
        np.testing.assert_allclose(rows["wd_negative"] + rows["wd_positive"], rows["wd"], atol=1e-12)
        np.testing.assert_allclose(rows["mean"].to_numpy(), y.astype(np.float64).mean(axis=0), rtol=1e-12, atol=1e-15)
        positions = index.md_positions[:30]
        md = stats.mapping_difficulty(index.x_md(layer)[:30], y[positions]).numpy()
        np.testing.assert_allclose(rows["md"].to_numpy(), md)
        sampled = stats.wasserstein_distance_sampled(y, seed=[5, layer]).numpy()
        np.testing.assert_allclose(rows["wd_sampled"].to_numpy(), sampled)
    with pytest.raises(ValueError, match="md_pairs=21"):
        stats.neuron_statistics(out, md_pairs=21)


def test_figures_1_and_2a_from_shards(tiny_model, tmp_path):
    from wneurons.report.figures.neurons import figure1, figure2a

    shards = {}
    for family in ("llama", "opt"):
        out = tmp_path / family
        collect_activation_shards(tiny_model(family), CharTokenizer(), TEXT, out, window=WINDOW, md_tokens=40)
        shards[family] = (out, stats.neuron_statistics(out, md_pairs=20))
    llama_dir, llama_stats = shards["llama"]
    opt_dir, opt_stats = shards["opt"]
    path = tmp_path / "fig" / "figure1.png"
    figure1(
        llama_dir,
        llama_stats,
        layer=1,
        nonlinearity="silu",
        out_path=path,
        contrast=(opt_dir, opt_stats, 1, torch.relu, "OPT"),
        label="Llama",
    )
    assert path.read_bytes().startswith(b"\x89PNG")
    with pytest.raises(ValueError, match="no neuron 999"):
        figure1(llama_dir, llama_stats, layer=1, neuron=999, nonlinearity="silu", out_path=tmp_path / "x.png")
    path2 = tmp_path / "figure2a.png"
    figure2a({"llama": llama_stats, "opt": opt_stats}, layer=0, out_path=path2)
    assert path2.read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".png") == ["figure2a.png"]  # no temp files


@pytest.mark.parametrize("threshold", [10**9, 2])  # float16 shards: radix-sort path, then counting path
def test_statistics_from_float16_window_blocks_equal_the_public_functions(tiny_model, tmp_path, monkeypatch, threshold):
    monkeypatch.setattr(stats, "HISTOGRAM_MIN_TOKENS", threshold)
    out = tmp_path / "shards"
    collect_activation_shards(
        tiny_model("llama"), CharTokenizer(), TEXT, out, window=WINDOW, batch_size=2, md_tokens=40
    )
    table = stats.neuron_statistics(out, md_pairs=20, chunk_neurons=9)
    index = ShardIndex.load(out)
    for layer in range(index.n_layers):
        y = index.y(layer)  # float16 [N, K]
        rows = table.filter(pl.col("layer") == layer)
        np.testing.assert_allclose(rows["wd"].to_numpy(), stats.wasserstein_distance_to_normal(y).numpy(), rtol=1e-12)
        neg = stats.sign_split(y)[0].numpy()
        np.testing.assert_allclose(rows["wd_negative"].to_numpy(), neg, rtol=1e-12, atol=1e-15)
        md = stats.mapping_difficulty(index.x_md(layer)[:40], y[index.md_positions[:40]]).numpy()
        np.testing.assert_allclose(rows["md"].to_numpy(), md, rtol=1e-12)


def test_a_failed_shard_write_surfaces_and_leaves_nothing(tiny_model, tmp_path, monkeypatch):
    import errno

    def disk_full(fd, data, position):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", disk_full)
    with pytest.raises(OSError, match="writing activation shards in .* failed") as info:
        collect_activation_shards(
            tiny_model("llama"), CharTokenizer(), TEXT, tmp_path / "s", window=WINDOW, md_tokens=10
        )
    assert info.value.__cause__.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []


def _reference_shard_bytes(model, ids, window, ranges, dtype, bos, md_positions) -> list[tuple[bytes, bytes]]:
    """Per layer, the bytes a shard directory's y and x arrays must hold, straight from the definition: the trunk
    run over the windows in the batches ``ranges`` (as the collector feeds them, so float32 sums round alike),
    every projection's output cast to ``dtype`` and laid out [n_windows, K, window], its float32 inputs at
    ``md_positions``; with ``bos`` each window is fed after it and its outputs are left out."""
    modules = registry.preactivation_modules(model)
    outs, ins = [[] for _ in modules], [[] for _ in modules]

    def record(layer):
        def hook(module, args, out):  # OPT's projections see [tokens, d]: every layer's is flattened alike
            outs[layer].append(out.reshape(-1, out.shape[-1]).clone())
            ins[layer].append(args[0].reshape(-1, args[0].shape[-1]).clone())

        return hook

    n_windows = ranges[-1][1]
    windows = torch.tensor(ids[: n_windows * window]).reshape(n_windows, window)
    handles = [m.register_forward_hook(record(i)) for i, m in enumerate(modules)]
    try:
        with torch.inference_mode():
            for lo, hi in ranges:
                batch = windows[lo:hi]
                if bos is not None:
                    batch = torch.cat([torch.full((hi - lo, 1), bos), batch], dim=1)
                model.base_model(input_ids=batch, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    expected = []
    skip = 0 if bos is None else 1
    for y, x in zip(outs, ins, strict=True):
        y = torch.cat(y).reshape(n_windows, window + skip, -1)[:, skip:]
        x = torch.cat(x).reshape(n_windows, window + skip, -1)[:, skip:]
        blocks = y.to(dtype).transpose(1, 2).contiguous().numpy()
        expected.append((blocks.tobytes(), x.reshape(-1, x.shape[-1])[md_positions].float().numpy().tobytes()))
    return expected


def _shard_bytes(out) -> list[tuple[bytes, bytes]]:
    index = ShardIndex.load(out)
    return [
        (np.load(out / shards.y_file(i)).tobytes(), np.load(out / shards.x_file(i)).tobytes()) for i in index.layers
    ]


@pytest.mark.parametrize("family", ["llama", "gpt2", "opt", "gpt_neox"])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_host_and_device_paths_write_the_definitions_bytes(tiny_model, tmp_path, monkeypatch, family, dtype):
    # Both ways a batch reaches the files: checked and queued per layer (the CPU), and made neuron-major where the
    # model runs, copied into the batch's buffers and checked once per batch (an accelerator: forced here, with
    # plain copies). Batches of 3 of 14 windows: the buffer sets are reused, the last batch is smaller. Window 64 x
    # 96 neurons is aligned, so "auto" writes with O_DIRECT; "buffered" through the page cache.
    from wneurons.lm import activations

    model, tok, window, batch = tiny_model(family), CharTokenizer(), 64, 3
    bos = 1 if family in ("llama", "gpt_neox") else None
    ids = tok(TEXT * 2, add_special_tokens=False)["input_ids"]
    n_windows = len(ids) // window
    ranges = [(lo, min(lo + batch, n_windows)) for lo in range(0, n_windows, batch)]
    written = {}
    for on_device, io in itertools.product((False, True), ("auto", "buffered")):
        monkeypatch.setattr(activations, "_transposes_on_device", lambda device, on=on_device: on)
        out = tmp_path / f"{on_device}-{io}"
        meta = collect_activation_shards(
            model, tok, TEXT * 2, out, window=window, batch_size=batch, md_tokens=50, seed=1, dtype=dtype, io=io,
            window_bos=bos is not None,
        )  # fmt: skip
        assert meta["io"] == ("direct" if io == "auto" else "buffered")
        itemsize = np.dtype(dtype).itemsize
        assert meta["host_buffer_bytes"] == 2 * batch * window * 3 * 96 * itemsize  # two batches of every layer
        written[on_device, io] = _shard_bytes(out)
        if (on_device, io) == (False, "auto"):
            md_positions = ShardIndex.load(out).md_positions
            expected = _reference_shard_bytes(model, ids, window, ranges, getattr(torch, dtype), bos, md_positions)
    for key, layers in written.items():
        assert layers == expected, key


@pytest.mark.parametrize("on_device", [False, True])
def test_a_buffer_set_is_refilled_only_after_the_writer_is_past_it(tiny_model, tmp_path, monkeypatch, on_device):
    # A writer thread much slower than the forward: the collector must wait for a buffer set to be written before
    # a later batch fills it again (with one window per batch, every set is reused six times).
    import time

    from wneurons.lm import activations

    real_write_y = shards.ShardFiles.write_y

    def slow_write_y(self, *args):
        time.sleep(0.01)
        real_write_y(self, *args)

    monkeypatch.setattr(shards.ShardFiles, "write_y", slow_write_y)
    monkeypatch.setattr(activations, "_transposes_on_device", lambda device: on_device)
    model, tok = tiny_model("llama"), CharTokenizer()
    meta = collect_activation_shards(model, tok, TEXT, tmp_path / "s", window=WINDOW, md_tokens=40, dtype="float16")
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    ranges = [(w, w + 1) for w in range(meta["n_windows"])]
    expected = _reference_shard_bytes(model, ids, WINDOW, ranges, torch.float16, None, np.array(meta["md_positions"]))
    assert meta["n_windows"] >= 12 and _shard_bytes(tmp_path / "s") == expected


def test_a_batch_retried_after_a_cuda_oom_keeps_its_buffer_set(tiny_model, tmp_path, monkeypatch):
    # On the accelerator path (forced) a CUDA OOM in the middle of the second batch's forward: the range is run
    # again at half the batch with the buffer set the failed attempt took (taking it a second time would wait
    # forever), and the shards hold the values of the batches that succeeded.
    import threading

    from wneurons.lm import activations

    monkeypatch.setattr(activations, "_transposes_on_device", lambda device: True)
    model, tok = tiny_model("llama"), CharTokenizer()
    failed = []

    def oom_once(module, args, out):
        if out.shape[0] == 4 and len(failed) < 2:
            failed.append(1)  # the first batch passes, the second fails once
            if len(failed) == 2:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected by the test)")

    handle = registry.preactivation_modules(model)[1].register_forward_hook(oom_once)
    result = {}

    def collect():
        kwargs = dict(window=WINDOW, batch_size=4, md_tokens=40, dtype="float32")
        result["meta"] = collect_activation_shards(model, tok, TEXT, tmp_path / "s", **kwargs)

    thread = threading.Thread(target=collect, daemon=True)
    thread.start()
    thread.join(timeout=60)
    handle.remove()
    assert not thread.is_alive(), "the retried batch waited for its own buffer set"
    meta = result["meta"]
    n = meta["n_windows"]
    ranges = [(0, 4), *[(lo, min(lo + 2, n)) for lo in range(4, n, 2)]]
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    expected = _reference_shard_bytes(model, ids, WINDOW, ranges, torch.float32, None, np.array(meta["md_positions"]))
    assert len(failed) == 2 and _shard_bytes(tmp_path / "s") == expected


def test_direct_and_buffered_shards_hold_the_same_values(tiny_model, tmp_path, monkeypatch):
    # window 128 x 96 neurons x 2 bytes = 24 KiB per window block: aligned, so "auto" writes with O_DIRECT.
    direct_reads, real_open_direct = [], shards.open_direct

    def recording_open_direct(path, flags):
        if flags == os.O_RDONLY:
            direct_reads.append(path.parent.name)
        return real_open_direct(path, flags)

    monkeypatch.setattr(shards, "open_direct", recording_open_direct)
    model, tables, ys = tiny_model("llama"), {}, {}
    for io in ("auto", "buffered"):
        out = tmp_path / io
        meta = collect_activation_shards(model, CharTokenizer(), TEXT, out, window=128, md_tokens=40, io=io)
        assert meta["io"] == ("direct" if io == "auto" else "buffered")
        assert json.loads((out / "index.json").read_text())["io"] == meta["io"]
        index = ShardIndex.load(out)
        ys[io] = [np.load(out / f"layer{layer:03d}.y.npy") for layer in range(index.n_layers)]
        assert index.y_blocks(0).offset == 4096
        # chunks of 16 neurons are aligned reads (O_DIRECT for the direct shards), chunks of 9 are not
        tables[io] = [stats.neuron_statistics(out, md_pairs=20, chunk_neurons=c) for c in (16, 9)]
    for direct, buffered in zip(ys["auto"], ys["buffered"], strict=True):
        np.testing.assert_array_equal(direct, buffered)
    for direct, buffered in zip(tables["auto"], tables["buffered"], strict=True):
        assert direct.equals(buffered)
    # only the direct shards are read with O_DIRECT, and only in the aligned chunks of 16: 96 / 16 per layer
    assert direct_reads == ["auto"] * (6 * index.n_layers)


def test_direct_io_where_it_is_impossible(tiny_model, tmp_path, monkeypatch):
    model = tiny_model("llama")
    with pytest.raises(ValueError, match=r"shard io 'direct': .*\(3072 bytes\) is not a multiple of 4096"):
        collect_activation_shards(
            model, CharTokenizer(), TEXT, tmp_path / "s", window=WINDOW, md_tokens=10, io="direct"
        )
    with pytest.raises(ValueError, match="shard io 'sync' is not one of auto, direct, buffered"):
        collect_activation_shards(model, CharTokenizer(), TEXT, tmp_path / "s", window=WINDOW, io="sync")
    assert list(tmp_path.iterdir()) == []
    meta = collect_activation_shards(model, CharTokenizer(), TEXT, tmp_path / "s", window=WINDOW, md_tokens=10)
    assert meta["io"] == "buffered" and "not a multiple of 4096" in meta["io_reason"]

    monkeypatch.setattr(shards, "open_direct", lambda path, flags: None)  # as on tmpfs before Linux 6.6
    with pytest.raises(ValueError, match="does not support O_DIRECT"):
        collect_activation_shards(model, CharTokenizer(), TEXT, tmp_path / "t", window=128, md_tokens=10, io="direct")
    meta = collect_activation_shards(model, CharTokenizer(), TEXT, tmp_path / "t", window=128, md_tokens=10)
    assert meta["io"] == "buffered" and "does not support O_DIRECT" in meta["io_reason"]


def test_a_failure_while_creating_the_shard_files_closes_what_was_opened(tiny_model, tmp_path, monkeypatch):
    created, real_create = [], shards.create_npy

    def create_then_fail(path, dtype, shape):
        if len(created) == 3:  # layer 0's y and x, layer 1's y: then the disk is full
            raise OSError(28, "No space left on device")
        created.append(path)
        return real_create(path, dtype, shape)

    monkeypatch.setattr(shards, "create_npy", create_then_fail)
    before = set(os.listdir("/proc/self/fd"))
    with pytest.raises(OSError, match="No space left"):
        collect_activation_shards(
            tiny_model("llama"), CharTokenizer(), TEXT, tmp_path / "s", window=WINDOW, md_tokens=10
        )
    assert set(os.listdir("/proc/self/fd")) == before
    assert list(tmp_path.iterdir()) == []


def test_restricted_layers_collect_only_those_and_stop_after_the_last(tiny_model, tmp_path):
    model = tiny_model("llama")  # 3 layers
    full, part = tmp_path / "full", tmp_path / "part"
    kwargs = dict(window=WINDOW, md_tokens=40, seed=2, dtype="float32")
    collect_activation_shards(model, CharTokenizer(), TEXT, full, **kwargs)
    fired = []
    last = registry.preactivation_modules(model)[2]
    handle = last.register_forward_hook(lambda *_: fired.append(1))
    try:
        meta = collect_activation_shards(model, CharTokenizer(), TEXT, part, layers=[1], **kwargs)
    finally:
        handle.remove()
    assert fired == []  # the forward stopped after layer 1's projection
    assert [entry["layer"] for entry in meta["layers"]] == [1]
    assert sorted(p.name for p in part.glob("*.npy")) == ["layer001.x.npy", "layer001.y.npy"]
    index = ShardIndex.load(part)
    assert index.layers == [1]
    np.testing.assert_array_equal(np.asarray(index.y(1)), np.asarray(ShardIndex.load(full).y(1)))
    with pytest.raises(IndexError, match=r"no shards for layer 0 \(collected layers: \[1\]\)"):
        index.y_blocks(0)
    table = stats.neuron_statistics(part, md_pairs=15, seed=5)
    reference = stats.neuron_statistics(full, md_pairs=15, seed=5).filter(pl.col("layer") == 1)
    assert table.equals(reference)
    with pytest.raises(ValueError, match="layers"):
        collect_activation_shards(model, CharTokenizer(), TEXT, tmp_path / "bad", layers=[3], **kwargs)


def test_collection_and_statistics_are_bit_reproducible(tiny_model, tmp_path, monkeypatch):
    # Two collections of the same model (torch on 1 and on 2 threads) write the same bytes, and the statistics of
    # those shards are the same bits for any neuron chunking and any number of reader threads. MD's weighted sum
    # went through BLAS, whose gemv summed a row in an order that depended on the chunk's row count.
    model, dirs, before = tiny_model("llama"), [], torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            dirs.append(tmp_path / f"t{threads}")
            collect_activation_shards(model, CharTokenizer(), TEXT, dirs[-1], window=WINDOW, md_tokens=60, batch_size=3)
    finally:
        torch.set_num_threads(before)
    files = sorted(p.name for p in dirs[0].glob("*.npy"))
    assert files and all((dirs[0] / f).read_bytes() == (dirs[1] / f).read_bytes() for f in files)
    tables = []
    for threads, chunk in ((1, 96), (3, 7), (2, 1)):
        monkeypatch.setattr(torch, "get_num_threads", lambda threads=threads: threads)
        tables.append(stats.neuron_statistics(dirs[0], wd_method="both", md_pairs=30, chunk_neurons=chunk))
    assert tables[0]["md"].is_not_nan().all()
    assert all(table.equals(tables[0]) for table in tables[1:])


def test_statistics_split_by_layer_range_join_to_the_same_bytes(tiny_model, tmp_path):
    """A revision's statistics run as parts over layer ranges (the planner's split, where one job is longer than the
    site allows) and joined: the same file, byte for byte, as one job over every layer; parts that leave out a
    layer, or come out of order, are refused."""
    from wneurons.jobs.neurons import join_neuron_stats, neuron_stats_job, neuron_stats_part_job
    from wneurons.store import io

    model = tiny_model("llama")
    out = tmp_path / "shards"
    collect_activation_shards(model, CharTokenizer(), TEXT, out, window=WINDOW, md_tokens=40, dtype="float16")
    spec = {"name": "tiny", "revision": "main", "local_path": str(tmp_path)}
    params = {"wd_method": "both", "md_pairs": 15, "seed": 5}
    whole = tmp_path / "neurons.parquet"
    neuron_stats_job(spec, str(out), str(whole), params)
    parts = [str(tmp_path / f"part{k}.parquet") for k in range(2)]
    for path, layers in zip(parts, [[0, 1], [2]], strict=True):
        neuron_stats_part_job(spec, str(out), path, params | {"layers": layers})
    joined = tmp_path / "joined.parquet"
    neuron_stats_job(spec, None, str(joined), params, parts=parts)
    assert joined.read_bytes() == whole.read_bytes()
    assert "part_layers" in io.read_parquet_metadata(parts[0]) and "part_layers" not in io.read_parquet_metadata(joined)
    with pytest.raises(ValueError, match=r"cover layers \[0, 1\], not \[0, 1, 2\]"):
        join_neuron_stats(parts[:1], str(tmp_path / "short.parquet"))
    with pytest.raises(ValueError, match=r"cover layers \[2, 0, 1\]"):
        join_neuron_stats(parts[::-1], str(tmp_path / "reversed.parquet"))
