"""Checkpoints on disk and their names: revisions ``step<N>``, local checkpoint suites, and the weight rows one
training-dynamics analysis reads from a saved checkpoint (safetensors sliced, .bin memory-mapped).

Steps and tokens: a revision is named ``step<N>``; Pythia trains on 2,097,152 tokens per step (1024 sequences of
2048 tokens), so step 25,000 is 52.4B tokens.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

PYTHIA_TOKENS_PER_STEP = 2_097_152
# A revision named for its training step, as Pythia's hub branches are.
STEP_REVISION = re.compile(r"^step(\d+)$")
_SUITE_DIR = re.compile(r"^(?:step|checkpoint-|checkpoint_|global_step)(\d+)$")


# ---------------------------------------------------------------- steps and revisions
def step_of(revision: str) -> int:
    """Training step of a revision named ``step<N>``; anything else is a ValueError naming it."""
    match = STEP_REVISION.match(revision)
    if match is None:
        raise ValueError(f"revision {revision!r} is not named step<N>; training dynamics need the step of each")
    return int(match.group(1))


def by_step(revisions: Iterable[str]) -> list[str]:
    """Revisions sorted by training step (duplicates removed)."""
    return sorted(dict.fromkeys(revisions), key=step_of)


def suite_checkpoints(path: str | Path, steps_from: str = "names", manifest: str = "manifest.json") -> dict[str, str]:
    """``{"step<N>": directory}`` of a local checkpoint suite, in step order.

    ``steps_from="names"``: every subdirectory named ``step<N>``, ``checkpoint-<N>`` (the transformers Trainer's
    name), ``checkpoint_<N>`` or ``global_step<N>`` that holds a ``config.json``. ``"manifest"``: the JSON file
    ``manifest`` in ``path``, ``{"checkpoints": [{"step": N, "path": "subdir"}, ...]}``.
    """
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"checkpoint suite {root}: no such directory")
    found: dict[int, str] = {}
    if steps_from == "names":
        for child in root.iterdir():
            match = _SUITE_DIR.match(child.name)
            if match and (child / "config.json").is_file():
                step = int(match.group(1))
                if step in found:
                    raise ValueError(f"checkpoint suite {root}: step {step} appears twice ({found[step]}, {child})")
                found[step] = str(child)
    elif steps_from == "manifest":
        manifest_path = root / manifest
        try:
            entries = json.loads(manifest_path.read_text())["checkpoints"]
            pairs = [(int(e["step"]), str(root / e["path"])) for e in entries]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ValueError(f"checkpoint suite manifest {manifest_path}: {err}") from None
        for step, directory in pairs:
            if step in found:
                raise ValueError(f"checkpoint suite manifest {manifest_path}: step {step} appears twice")
            if not (Path(directory) / "config.json").is_file():
                raise FileNotFoundError(f"checkpoint suite manifest {manifest_path}: {directory} has no config.json")
            found[step] = directory
    else:
        raise ValueError(f"steps_from {steps_from!r}: expected names or manifest")
    if not found:
        raise ValueError(f"checkpoint suite {root}: no checkpoint directories found (steps_from: {steps_from})")
    return {f"step{s}": found[s] for s in sorted(found)}


def resolve_checkpoint_suite(name: str, spec: dict, trained_dir: str, workdir: str | Path = ".") -> dict[str, str]:
    """``{revision: directory}`` of a model whose source is ``checkpoint_suite``; fills its revisions in place.

    A suite the workflow trains (``train`` set) is saved at exactly the configured revisions, in
    ``<trained_dir>/step<N>``. A suite on disk is read (:func:`suite_checkpoints`): ``final_revision`` left at its
    default ``main`` becomes the last step, empty ``checkpoints`` become every other step, and every configured
    revision must exist in it (a ValueError naming the model otherwise).
    """
    suite = spec["checkpoint_suite"]
    root = Path(trained_dir if suite["train"] is not None else suite["path"])
    if suite["train"] is not None:
        revisions = training_revisions(spec)  # validates the step<N> names
        return {r: str(root / r) for r in revisions}
    found = suite_checkpoints(Path(workdir) / root, suite["steps_from"], suite["manifest"])
    steps = list(found)
    if spec["final_revision"] == "main":
        spec["final_revision"] = steps[-1]
    if not spec["checkpoints"]:
        spec["checkpoints"] = [r for r in steps if r != spec["final_revision"]]
    listed = spec["checkpoint_ablations"]
    missing = [r for r in training_revisions(spec) + (listed if isinstance(listed, list) else []) if r not in found]
    if missing:
        raise ValueError(f"models.{name}.checkpoint_suite: {root} has no checkpoint for {', '.join(missing)}")
    return {r: str(root / Path(found[r]).relative_to(Path(workdir) / root)) for r in steps}


def training_revisions(spec: Mapping) -> list[str]:
    """Every revision a model's training-dynamics analyses read: final, checkpoints and the weight grid, by step."""
    return by_step([spec["final_revision"], *spec["checkpoints"], *spec["weight_checkpoints"]])


# ---------------------------------------------------------------- weight files and rows
def weight_tensor_name(layers_path: str, projection: str, layer: int) -> str:
    """State-dict name of a layer's pre-nonlinearity projection weight, e.g.
    ``gpt_neox.layers.1.mlp.dense_h_to_4h.weight``."""
    return f"{layers_path}.{layer}.{projection}.weight"


def _safetensors_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.safetensors"))


def checkpoint_weight_files(directory: str | Path) -> list[Path]:
    """The weight files of a saved checkpoint (safetensors, else PyTorch .bin), sorted by name."""
    d = Path(directory)
    files = _safetensors_files(d) or sorted(d.glob("pytorch_model*.bin"))
    if not files:
        raise FileNotFoundError(f"checkpoint {d}: no *.safetensors or pytorch_model*.bin weight files")
    return files


def read_weight_rows(directory: str | Path, tensor: str | list[str], transpose: bool = False) -> tuple[str, np.ndarray]:
    """One weight matrix of a saved checkpoint as float32 [neurons, d_in] (rows = neurons; bias not included).

    Safetensors checkpoints are sliced: only that tensor's bytes are read. PyTorch .bin files are memory-mapped
    and only that tensor is copied. ``transpose`` for Conv1D layouts (GPT-2) that store [d_in, neurons].
    ``tensor``: a name or candidate names (the first present is read). Returns (name read, rows).
    """
    import torch

    names = [tensor] if isinstance(tensor, str) else list(tensor)

    for path in checkpoint_weight_files(directory):
        if path.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as fh:
                found = [n for n in names if n in fh.keys()]  # noqa: SIM118 - safe_open has no __contains__
                if found:
                    name, w = found[0], fh.get_slice(found[0])[:]
                    break
        else:
            state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
            found = [n for n in names if n in state]
            if found:
                name, w = found[0], state[found[0]]
                break
    else:
        raise KeyError(f"checkpoint {directory}: no tensor {' or '.join(names)} in its weight files")
    w = w.to(torch.float32)
    return name, (w.T if transpose else w).contiguous().numpy()


def rows_sha256(rows: np.ndarray) -> str:
    """sha256 of a float32 C-ordered array's bytes (the weight rows one analysis reads)."""
    return hashlib.sha256(np.ascontiguousarray(rows, dtype=np.float32).tobytes()).hexdigest()
