"""A complete, tiny, offline workflow project: a random 4-layer Llama with a word-level tokenizer, synthetic
BLiMP / TSE / WikiText-2 files with their checksums, and a config that exercises every rule of the DAG.

The real Snakefile and rules run unchanged against it (``snakemake -s <repo>/Snakefile -d <tmp>``), so the
workflow tests (incremental runs, resume after kill -9, SLURM) cost seconds per job instead of minutes.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import subprocess
import sys
from pathlib import Path

import yaml

from wneurons.experiment.grid import BENCHMARKS, CAPABILITY

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
# The benchmarks a tiny project scores: its config names no capability suite (evaluation.capability.tasks: []).
SCORED_BENCHMARKS = tuple(b for b in BENCHMARKS if b != CAPABILITY)

NOUNS = ["dog", "cat", "author", "pilot", "farmer", "doctor", "guard", "teacher"]
VERBS = ["runs", "sleeps", "laughs", "swims", "smiles", "waits"]
PLURAL_VERBS = ["run", "sleep", "laugh", "swim", "smile", "wait"]
FILLER = ["the", "a", "no", "most", "that", "likes", "is", "are", "ever", "been", "happy", "here", ".", "and"]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_checksums(data_dir: Path, out: Path) -> None:
    """``sha256sum``-style lines for every file of ``data_dir`` (what the config's ``checksums`` files hold)."""
    lines = [f"{_sha256(p)}  {p.name}" for p in sorted(data_dir.iterdir())]
    out.write_text("\n".join(lines) + "\n")


def _blimp(data_dir: Path) -> None:
    data_dir.mkdir(parents=True)
    for uid, term in [("regular_plural_subject_verb_agreement_1", "subject_verb_agreement"), ("npi_present_1", "npi")]:
        with open(data_dir / f"{uid}.jsonl", "w") as fh:
            for i in range(12):
                noun, v_s, v_p = NOUNS[i % len(NOUNS)], VERBS[i % len(VERBS)], PLURAL_VERBS[i % len(VERBS)]
                row = {
                    "sentence_good": f"the {noun} {v_s} here .",
                    "sentence_bad": f"the {noun} {v_p} here .",
                    "field": "morphology",
                    "linguistics_term": term,
                    "UID": uid,
                    "pairID": str(i),
                }
                fh.write(json.dumps(row) + "\n")


def _tse(data_dir: Path) -> None:
    data_dir.mkdir(parents=True)
    agreement = {
        "sing": [(f"the {n} {v}", f"the {n} {p}") for n, v, p in zip(NOUNS, VERBS, PLURAL_VERBS, strict=False)]
    }
    npi = {
        "past": [
            (f"no {n} has ever {v}", f"the {n} that no guard likes has ever {v}", f"most {n} has ever {v}")
            for n, v in zip(NOUNS, VERBS, strict=False)
        ]
    }
    (data_dir / "simple_agrmt.pickle").write_bytes(pickle.dumps(agreement, protocol=2))
    (data_dir / "simple_npi_anim.pickle").write_bytes(pickle.dumps(npi, protocol=2))


def _wikitext(data_dir: Path) -> None:
    data_dir.mkdir(parents=True)
    words = NOUNS + VERBS + PLURAL_VERBS + FILLER
    for split, offset in (("test", 0), ("valid", 7)):
        lines = [" \n", " = Title = \n", " \n"]
        for i in range(60):
            sent = " ".join(words[(i * 7 + j * 3 + offset) % len(words)] for j in range(12))
            lines.append(f" {sent} \n")
        (data_dir / f"wiki.{split}.raw").write_text("".join(lines))


def word_tokenizer():
    """A word-level tokenizer over the tiny project's words (ids 0-3: pad, BOS, EOS, unk), for every tiny model."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    vocab = {tok: i for i, tok in enumerate(specials + sorted(set(NOUNS + VERBS + PLURAL_VERBS + FILLER + ["="])))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def _model(model_dir: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    fast = word_tokenizer()
    vocab = fast.get_vocab()
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    model.save_pretrained(model_dir)
    fast.save_pretrained(model_dir)


def tiny_config(root: Path) -> dict:
    return {
        "models": {
            "tiny-llama": {"family": "llama", "local_path": "model", "num_layers": 4, "params_b": 0.001},
        },
        "data": {
            "blimp": {"local_dir": "src/blimp", "checksums": "checksums/blimp.sha256"},
            "tse": {"local_dir": "src/tse", "checksums": "checksums/tse.sha256", "format": "pickle"},
            "wikitext2": {"local_dir": "src/wikitext2", "checksums": "checksums/wikitext2.sha256"},
        },
        "evaluation": {"batch_size": 8, "perplexity_window": 32, "perplexity_max_tokens": 256},
        "neurons": {"window": 32, "max_tokens": 512, "md_tokens": 64, "md_pairs": 16},
        "ablation": {
            "random_trials": 2,
            "percents": [5],
            "layer_groups": {"size": 2, "percents": [5]},
            "matched": {"tolerance": 0.05, "max_steps": 4},
        },
        "figures": {"figure1": {"layer": 1}, "figure2a_layer": 1},
    }


def capability_suite(root: Path, limit: int, seed: int = 1) -> dict:
    """The WikiText-2 capability tasks for the project under ``root``: its validation split rewritten with sentences
    that end in words of the tiny vocabulary (the tiny project's own has too few sentence ends for a cloze), its
    checksums with it; returns the config's ``evaluation.capability``, ``limit`` documents a task."""
    from wneurons.store.data import WIKITEXT_VALID
    from wneurons.store.lmeval_tasks import WIKITEXT_TASKS

    lines = [" \n", " = Title = \n", " \n"]
    for i in range(20):
        sentences = [f"the {NOUNS[(i + k) % len(NOUNS)]} {VERBS[(i * 3 + k) % len(VERBS)]} ." for k in range(4)]
        lines.append(" " + " ".join(sentences) + " \n")
    wikitext = root / "src/wikitext2"
    (wikitext / WIKITEXT_VALID).write_text("".join(lines))
    write_checksums(wikitext, root / "checksums/wikitext2.sha256")
    return {
        "source": "wikitext2",
        "tasks": list(WIKITEXT_TASKS),
        "limits": dict.fromkeys(WIKITEXT_TASKS, limit),
        "seed": seed,
    }


def make_tiny_project(root: Path) -> Path:
    """Write model, data, checksums and config.yaml under ``root``; return the config path."""
    root.mkdir(parents=True, exist_ok=True)
    _model(root / "model")
    _blimp(root / "src/blimp")
    _tse(root / "src/tse")
    _wikitext(root / "src/wikitext2")
    (root / "checksums").mkdir()
    for name in ("blimp", "tse", "wikitext2"):
        write_checksums(root / "src" / name, root / "checksums" / f"{name}.sha256")
    config_path = root / "config.yaml"
    config_path.write_text(yaml.safe_dump(tiny_config(root), sort_keys=False))
    return config_path


def add_model_copy(root: Path, config: dict, name: str, source: str = "tiny-llama") -> None:
    """Add ``name`` to ``config``: ``source``'s weights copied to a folder of their own under ``root``, so the two are
    distinct models to the config's check (one model named twice is refused: every job would run twice)."""
    import shutil

    entry = dict(config["models"][source])
    shutil.copytree(root / entry["local_path"], root / f"model-{name}")
    entry["local_path"] = f"model-{name}"
    config["models"][name] = entry


def tiny_grid(root: Path) -> dict:
    """The validated config of the project under ``root`` (defaults filled), for the grid and target functions."""
    from wneurons.experiment.config import validate_config

    config = yaml.safe_load((root / "config.yaml").read_text())
    return validate_config(config, REPO / "workflow/schemas/config.schema.yaml", root)


def snakemake_command(root: Path, *args: str, threads: bool = True, snakefile: Path | None = None) -> list[str]:
    """The command line that runs the repository's Snakefile (or ``snakefile``) in ``root`` with its config.yaml
    (replacing the paper grid), followed by ``args``. ``threads``: jobs run in threads of the Snakemake process, as
    with `make demo` and profiles/local (wneurons.jobs.inprocess); else each job is a process of its own, as under
    SLURM."""
    return [
        *SNAKEMAKE,
        "-s",
        str(snakefile or REPO / "Snakefile"),
        "-d",
        str(root),
        "--configfile",
        str(root / "config.yaml"),
        *(["--force-use-threads"] if threads else []),
        *args,
    ]


def snakemake(
    root: Path, *args: str, timeout: float = 900, check: bool = True, snakefile: Path | None = None
) -> subprocess.CompletedProcess:
    """Run :func:`snakemake_command` to completion; output captured, failure raised unless ``check`` is False."""
    cmd = snakemake_command(root, *args, snakefile=snakefile)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def dry_run_jobs(root: Path, *args: str, snakefile: Path | None = None) -> dict[str, int]:
    """Job counts per rule that a dry run of ``args`` (targets, options) would execute."""
    proc = snakemake(root, "-n", *args, "--quiet", "rules", snakefile=snakefile)  # --quiet takes a list: last
    counts: dict[str, int] = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] not in ("total", "job"):
            counts[parts[0]] = int(parts[1])
    return counts
