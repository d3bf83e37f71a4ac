"""A miniature Pythia: a small GPT-NeoX trained from scratch on CPU, saved at chosen steps as a checkpoint suite.

No hub checkpoint can be fetched offline, so the demo makes its own training run and follows its neurons the way
§2.3 follows Pythia's. Text: the second part of the WikiText-2 **test** split (the raw train split is not among
the verified data). That is acceptable because nothing the analyses measure reads it: the neuron statistics read
the first ``neurons.max_tokens`` tokens of test (checked here, with the suite's own tokenizer: the training text
must start after the last character they read), perplexity reads validation, and BLiMP / TSE are their own data.

Reproducible: a byte-level BPE tokenizer trained on the same text, weights from ``torch.Generator`` seeded from
config, batches from ``numpy.random.default_rng(seed)``, deterministic torch algorithms and a fixed thread count;
the same settings give byte-identical checkpoints (their sha256 are recorded in ``manifest.json``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from wneurons.store import io

log = logging.getLogger(__name__)

EOS = "<|endoftext|>"
_HEADING = re.compile(r"^ = [^=].* = $", re.MULTILINE)


def training_text(text: str, start_fraction: float) -> tuple[str, int]:
    """The part of ``text`` from the first article heading (`` = Title = ``) at or after ``start_fraction`` of
    its characters, and the character offset where it starts."""
    if not 0 <= start_fraction < 1:
        raise ValueError(f"train.text_start must be in [0, 1), got {start_fraction}")
    match = _HEADING.search(text, int(len(text) * start_fraction))
    if match is None:
        raise ValueError(f"no article heading after {start_fraction:.0%} of the text to start training from")
    return text[match.start() :], match.start()


def train_tokenizer(text: str, vocab_size: int):
    """A byte-level BPE tokenizer (GPT-NeoX style, ``<|endoftext|>`` as BOS / EOS / pad) trained on ``text``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(text.split("\n"), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOS, eos_token=EOS, pad_token=EOS, unk_token=EOS)


def statistics_end_char(tokenizer, test_text: str, max_tokens: int | None, before: int) -> int:
    """Character offset just past the last token of ``test_text`` that the neuron statistics read (the first
    ``max_tokens`` tokens; all of them when None). Only ``test_text[:before]`` is tokenized: if it holds fewer
    than ``max_tokens`` tokens the statistics read past ``before`` and the text's length is returned."""
    if max_tokens is None:
        return len(test_text)
    head = test_text[:before]
    offsets = tokenizer(head, return_offsets_mapping=True, add_special_tokens=False)["offset_mapping"]
    if len(offsets) < max_tokens:
        return len(test_text)
    return int(offsets[max_tokens - 1][1])


@contextlib.contextmanager
def deterministic(threads: int) -> Iterator[None]:
    """Deterministic torch kernels and a fixed intra-op thread count (float sums depend on it), restored after."""
    old_threads, old_det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old_det)
        torch.set_num_threads(old_threads)


def build_model(tokenizer, arch: dict, seq_len: int, seed: int):
    """A fresh GPT-NeoX (Pythia's architecture: parallel residual, rotary on 25% of each head, GELU) with
    weights drawn from ``seed``."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(
        vocab_size=len(tokenizer),
        hidden_size=arch["hidden_size"],
        num_hidden_layers=arch["num_layers"],
        num_attention_heads=arch["num_heads"],
        intermediate_size=arch["intermediate_size"],
        max_position_embeddings=seq_len,
        rotary_pct=0.25,
        use_parallel_residual=True,
        hidden_act="gelu",
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPTNeoXForCausalLM(config)
    return model


def _save(model, tokenizer, out_dir: Path, step: int) -> dict:
    target = out_dir / f"step{step}"
    model.save_pretrained(target, safe_serialization=True)
    tokenizer.save_pretrained(target)
    weights = sorted(target.glob("*.safetensors"))
    return {
        "step": step,
        "path": target.name,
        "weights_sha256": io.sha256_file(weights[0]) if len(weights) == 1 else None,
    }


def train_checkpoint_suite(
    out_dir: str | Path,
    test_text: str,
    save_steps: list[int],
    train: dict,
    *,
    statistics_max_tokens: int | None,
    text_sha256: str | None = None,
) -> dict:
    """Train a miniature GPT-NeoX and save it (``save_pretrained`` + tokenizer) at every step of ``save_steps``
    (step 0 = the initialization) into ``out_dir/step<N>/``; write ``manifest.json`` (steps, paths, weight
    sha256) and return it. ``train``: seed, threads, vocab_size, seq_len, batch_size, learning_rate,
    warmup_steps, text_start and the architecture (num_layers, hidden_size, num_heads, intermediate_size).
    Raises when the training text overlaps the tokens the neuron statistics read."""
    start_time = time.perf_counter()
    steps = sorted(set(int(s) for s in save_steps))
    if not steps or steps[0] < 0:
        raise ValueError(f"save steps must be non-negative, got {save_steps}")
    text, start_char = training_text(test_text, train["text_start"])
    with deterministic(train["threads"]), io.atomic_directory(out_dir) as out:
        tokenizer = train_tokenizer(text, train["vocab_size"])
        stats_end = statistics_end_char(tokenizer, test_text, statistics_max_tokens, before=start_char)
        if stats_end > start_char:
            raise ValueError(
                f"train.text_start: the training text starts at character {start_char} of wiki.test.raw but the "
                f"neuron statistics read up to character {stats_end} (neurons.max_tokens {statistics_max_tokens}); "
                "raise text_start or lower neurons.max_tokens"
            )
        ids = np.asarray(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=np.int64)
        log.info("tokenizer and %d training tokens ready in %.1f s", ids.size, time.perf_counter() - start_time)
        seq_len, batch = train["seq_len"], train["batch_size"]
        if ids.size <= seq_len + 1:
            raise ValueError(f"training text has {ids.size} tokens, fewer than one sequence of {seq_len}")
        model = build_model(tokenizer, train, seq_len, train["seed"])
        optimizer = torch.optim.AdamW(model.parameters(), lr=train["learning_rate"], weight_decay=0.01)
        warmup = max(1, train["warmup_steps"])
        total = steps[-1]

        def lr_factor(step: int) -> float:  # linear warm-up, then cosine to 10% (Pythia's schedule shape)
            if step < warmup:
                return (step + 1) / warmup
            progress = (step - warmup) / max(1, total - warmup)
            return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
        rng = np.random.default_rng(train["seed"])
        saved, losses = [], []
        model.train()
        for step in range(total + 1):
            if step in steps:
                model.eval()
                saved.append(_save(model, tokenizer, out, step))
                model.train()
                log.info(
                    "step %d saved (loss %.3f, %.1f s)",
                    step,
                    losses[-1] if losses else math.nan,
                    time.perf_counter() - start_time,
                )
            if step == total:
                break
            starts = rng.integers(0, ids.size - seq_len - 1, size=batch)
            x = torch.from_numpy(np.stack([ids[s : s + seq_len] for s in starts]))
            loss = model(input_ids=x, labels=x).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            losses.append(loss.detach().item())
        manifest = {
            "checkpoints": saved,
            "train": train,
            "text": {
                "split": "wikitext-2 test",
                "start_char": start_char,
                "statistics_end_char": stats_end,
                "n_tokens": int(ids.size),
                "test_sha256": text_sha256,
            },
            "loss": {str(s): losses[s - 1] for s in steps if s > 0},
            "seconds": round(time.perf_counter() - start_time, 2),
            "provenance": io.provenance(seed=train["seed"], threads=train["threads"]),
        }
        io.write_json(out / "manifest.json", manifest)
    return manifest
