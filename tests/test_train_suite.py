"""The demo's miniature training run (wneurons.lm.train_suite): reproducible, and kept off the statistics' text."""

from __future__ import annotations

import json

import pytest

from wneurons.lm.train_suite import train_checkpoint_suite
from wneurons.store import io

WORDS = "the dog cat runs sleeps a of and to in that is was for on with as by at from".split()
TRAIN = {
    "seed": 0,
    "threads": 1,
    "vocab_size": 300,
    "seq_len": 16,
    "batch_size": 2,
    "learning_rate": 0.003,
    "warmup_steps": 1,
    "text_start": 0.5,
    "num_layers": 2,
    "hidden_size": 16,
    "num_heads": 2,
    "intermediate_size": 32,
}


def _text() -> str:
    lines = []
    for article in range(4):
        lines += ["", f" = Article {article} = ", ""]
        lines += [" " + " ".join(WORDS[(i * 7 + j * 3 + article) % len(WORDS)] for j in range(12)) for i in range(40)]
    return "\n".join(lines)


def _hashes(out_dir) -> list[tuple[int, str]]:
    manifest = io.read_json(out_dir / "manifest.json")
    return [(c["step"], c["weights_sha256"]) for c in manifest["checkpoints"]]


def test_same_seed_gives_identical_checkpoints(tmp_path):
    text = _text()
    first = train_checkpoint_suite(tmp_path / "a", text, [0, 3], TRAIN, statistics_max_tokens=20)
    train_checkpoint_suite(tmp_path / "b", text, [3, 0], TRAIN, statistics_max_tokens=20)
    assert _hashes(tmp_path / "a") == _hashes(tmp_path / "b")
    assert [c["path"] for c in first["checkpoints"]] == ["step0", "step3"]
    assert (tmp_path / "a" / "step3" / "config.json").is_file()
    assert (tmp_path / "a" / "step3" / "tokenizer.json").is_file()
    steps = dict(_hashes(tmp_path / "a"))
    assert steps[0] != steps[3]  # the run trained
    train_checkpoint_suite(tmp_path / "c", text, [0, 3], TRAIN | {"seed": 1}, statistics_max_tokens=20)
    assert dict(_hashes(tmp_path / "c"))[0] != steps[0]
    assert json.loads((tmp_path / "a" / "manifest.json").read_text())["text"]["start_char"] > 0


def test_training_text_must_start_after_what_the_statistics_read(tmp_path):
    with pytest.raises(ValueError, match="neuron statistics read up to character"):
        train_checkpoint_suite(tmp_path / "a", _text(), [0, 1], TRAIN, statistics_max_tokens=None)
    assert not (tmp_path / "a").exists()  # nothing half-written
