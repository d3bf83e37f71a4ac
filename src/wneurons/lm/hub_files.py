"""Which files of a hub revision its jobs read: the weight layout a transformers load picks, and the file plan of
staging (:func:`plan_files`): a model load's config, tokenizer and weights, or for a revision read only by weight
rows, its config, shard index and only the shard(s) holding the layers read.

Pure: the caller passes the revision's file names and a way to parse one small file (the shard index, config.json),
so the same plan serves staging (:mod:`wneurons.lm.hub_staging`, from downloaded files) and the staging preflight
(:func:`wneurons.lm.hub.staging_preflight`, from the hub's answers) without either of them asking the hub twice.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import NamedTuple

from wneurons.store.staged import StagingError

__all__ = [
    "CONFIG_FILES",
    "TOKENIZER_FILES",
    "WEIGHT_LAYOUTS",
    "FilePlan",
    "layer_tensors",
    "plan_files",
    "tensor_files",
    "weight_files",
]

# What a model load reads besides its weights (each fetched when the revision has it; config.json is required).
CONFIG_FILES = ("config.json", "generation_config.json")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
)
# Weight layouts in the order transformers prefers them: (shard index, single file).
WEIGHT_LAYOUTS = (
    ("model.safetensors.index.json", "model.safetensors"),
    ("pytorch_model.bin.index.json", "pytorch_model.bin"),
)


def _layout(names: Collection[str], read_index: Callable[[str], Mapping]) -> tuple[str | None, list[str], dict]:
    """The weight layout a transformers load reads among ``names``: (shard index or None, tensor files, the
    index's weight map or {}). Safetensors where the revision has a complete layout of them, else PyTorch ``.bin``:
    a safetensors index naming shards the revision lacks falls back to a complete ``.bin`` layout."""
    broken = []
    for index, single in WEIGHT_LAYOUTS:
        if index in names:
            weight_map = dict(read_index(index)["weight_map"])
            shards = sorted(set(weight_map.values()))
            missing = [s for s in shards if s not in names]
            if not missing:
                return index, shards, weight_map
            broken.append(f"{index} names shards the revision does not have: {', '.join(missing)}")
        elif single in names:
            return None, [single], {}
    if broken:
        raise StagingError("; ".join(broken))
    layouts = ", ".join(name for layout in WEIGHT_LAYOUTS for name in layout)
    raise StagingError(f"no weights: the revision has none of {layouts}")


def weight_files(names: Collection[str], read_index: Callable[[str], Mapping]) -> list[str]:
    """The weight files a transformers load reads among a revision's files ``names``: safetensors where the
    revision has a complete set of them, else PyTorch ``.bin``; for a sharded checkpoint its index (first) and the
    shards it names. ``read_index(name)`` returns that index file's parsed JSON (called only for a sharded layout)."""
    index, shards, _ = _layout(names, read_index)
    return [index, *shards] if index else shards


def layer_tensors(family: str, layers: Iterable[int]) -> list[str]:
    """State-dict names a weight-rows job reads for ``layers`` of a model family (its pre-nonlinearity projection
    weight, under each of the family's layer paths): :func:`wneurons.store.checkpoints.weight_tensor_name`."""
    from wneurons.lm.registry import family_spec
    from wneurons.store.checkpoints import weight_tensor_name

    spec = family_spec(family)
    return [weight_tensor_name(path, spec.projection, layer) for layer in layers for path in spec.layers_paths]


class FilePlan(NamedTuple):
    """What staging one revision fetches: ``wanted`` (repository files, in order), ``weight_files`` (every tensor
    file of the revision's weight layout, fetched or not: what its weight digest covers) and ``tensors`` (for a
    revision read only by weight rows: the tensors read; None when a job loads the whole model)."""

    wanted: list[str]
    weight_files: list[str]
    tensors: list[str] | None


def plan_files(
    names: Collection[str],
    read_json: Callable[[str], Mapping],
    *,
    layers: Sequence[int] | None = None,
    family: str | None = None,
) -> FilePlan:
    """The files to stage among a revision's ``names``: with ``layers`` None, what a model load reads (config,
    tokenizer and every weight file); with ``layers``, what a weight-rows job reads (the config, the shard index
    and only the shard(s) holding those layers' tensors; a single-file checkpoint is fetched whole). ``family``:
    the model family (None: the revision's config.json names it). ``read_json(name)`` parses one small repository
    file (the index, config.json), fetched when needed. A StagingError when the revision lacks config.json or a
    complete weight layout, or its index has none of the tensors read."""
    if "config.json" not in names:
        raise StagingError("the revision has no config.json")
    index, shards, weight_map = _layout(names, read_json)
    if layers is None:
        present = [n for n in (*CONFIG_FILES, *TOKENIZER_FILES) if n in names]
        return FilePlan(present + ([index] if index else []) + shards, shards, None)
    tensors = layer_tensors(family or read_json("config.json")["model_type"], layers)
    if index is None:
        chosen = shards
    else:
        chosen = sorted({weight_map[t] for t in tensors if t in weight_map})
        if not chosen:
            raise StagingError(f"{index} has none of the tensors weight rows read ({', '.join(tensors)})")
    present = [n for n in CONFIG_FILES if n in names]
    return FilePlan(present + ([index] if index else []) + chosen, shards, tensors)


def tensor_files(names: Iterable[str]) -> list[str]:
    """The files holding tensors (not the shard index), sorted: what the weight digest covers."""
    return sorted(n for n in names if n.endswith((".safetensors", ".bin")))
