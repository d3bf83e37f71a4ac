"""Training dynamics: the same neurons followed over checkpoints (paper §2.3, Fig. 2b-d; §6, Fig. 6b-d).

Cohorts are chosen once, at the model's final revision, and looked up unchanged at every checkpoint:
``wd_top1_layer1`` (top 1% WD of MLP block index 1, Fig. 2b-d), ``wd_top5_all_layers`` (top 5% WD of every layer,
Fig. 6c-d) and ``md_top5_layer1`` (top 5% MD of block index 1, Fig. 6b). Everything here is a pure function of
arrays and tables (no model, no files) except :func:`read_weight_rows` and the checkpoint-suite readers, which
only read what they are given; the jobs in :mod:`wneurons.jobs` do the writing.

Steps and tokens: a revision is named ``step<N>``; Pythia trains on 2,097,152 tokens per step (1024 sequences of
2048 tokens), so step 25,000 is 52.4B tokens.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import polars as pl
from scipy import stats as sstats

from wneurons.selection import top_percent_indices

PYTHIA_TOKENS_PER_STEP = 2_097_152
# The paper's three cohorts (spec D1), as the defaults of config `training.cohorts`.
DEFAULT_COHORTS = {"layer": 1, "wd_percent": 1.0, "all_layers_percent": 5.0, "md_percent": 5.0, "rule": "authors"}
_STEP = re.compile(r"^step(\d+)$")
_SUITE_DIR = re.compile(r"^(?:step|checkpoint-|checkpoint_|global_step)(\d+)$")


class CheckpointIntegrityError(ValueError):
    """Two checkpoints with identical weights, or a checkpoint equal to the final one."""


# ---------------------------------------------------------------- steps and revisions
def step_of(revision: str) -> int:
    """Training step of a revision named ``step<N>``; anything else is a ValueError naming it."""
    match = _STEP.match(revision)
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


# ---------------------------------------------------------------- cohorts
def cohort_specs(settings: Mapping = DEFAULT_COHORTS) -> dict[str, tuple[str, float, list[int] | None]]:
    """name -> (statistic, percent, layers; None = every layer): ``wd_layer`` (top 1% WD of block index 1,
    Fig. 2b-d), ``wd_all_layers`` (top 5% WD of every layer, Fig. 6c-d), ``md_layer`` (top 5% MD, Fig. 6b)."""
    layer = [int(settings["layer"])]
    return {
        "wd_layer": ("wd", float(settings["wd_percent"]), layer),
        "wd_all_layers": ("wd", float(settings["all_layers_percent"]), None),
        "md_layer": ("md", float(settings["md_percent"]), layer),
    }


def choose_cohorts(
    final: pl.DataFrame, settings: Mapping = DEFAULT_COHORTS, md_values: pl.DataFrame | None = None
) -> dict:
    """The cohorts of :func:`cohort_specs` from the final revision's neuron table (columns layer, neuron, wd, md).

    ``md_values`` (columns layer, neuron, md) replaces the table's MD for the MD cohort (e.g. MD over the pair
    sample). Returns ``{name: {"statistic", "percent", "rule", "layers": {"1": [indices]}, "values": {"1":
    [values]}, "n_per_layer": {...}}}``: indices sorted, values the ranking statistic of those neurons.
    """
    rule = settings["rule"]
    out = {}
    for name, (statistic, percent, layers) in cohort_specs(settings).items():
        table = md_values if statistic == "md" and md_values is not None else final
        if statistic not in table.columns:
            raise ValueError(f"cohort {name}: the table has no column {statistic!r}")
        use_layers = sorted(table["layer"].unique().to_list()) if layers is None else layers
        chosen, values = {}, {}
        for layer in use_layers:
            rows = table.filter(pl.col("layer") == layer).sort("neuron")
            if rows.height == 0:
                raise ValueError(f"cohort {name}: no neurons of layer {layer} in the final revision's table")
            v = rows[statistic].to_numpy().astype(np.float64)
            idx = top_percent_indices(v, percent, rule=rule)
            chosen[str(layer)] = rows["neuron"].to_numpy()[idx].astype(int).tolist()
            values[str(layer)] = v[idx].tolist()
        out[name] = {
            "statistic": statistic,
            "percent": percent,
            "rule": rule,
            "layers": chosen,
            "values": values,
            "n_per_layer": {k: len(v) for k, v in chosen.items()},
        }
    return out


def cohort_frame(cohort: Mapping) -> pl.DataFrame:
    """(layer, neuron) rows of one cohort of :func:`choose_cohorts`."""
    layers = [int(layer) for layer, idx in cohort["layers"].items() for _ in idx]
    neurons = [int(n) for idx in cohort["layers"].values() for n in idx]
    return pl.DataFrame({"layer": layers, "neuron": neurons}, schema={"layer": pl.Int64, "neuron": pl.Int64})


def _mean_sem(values: np.ndarray) -> tuple[float, float]:
    v = values[np.isfinite(values)]
    if v.size == 0:
        return math.nan, math.nan
    sem = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else math.nan
    return float(v.mean()), sem


def cohort_statistic(table: pl.DataFrame, cohort: Mapping, statistic: str = "wd") -> dict:
    """Mean and SEM (ddof=1) of ``statistic`` over a cohort's neurons in one checkpoint's table, and the mean
    over every neuron of the cohort's layers (the layer baseline). NaN statistics (dead neurons) are left out."""
    members = cohort_frame(cohort)
    rows = table.join(members, on=["layer", "neuron"], how="semi")
    if rows.height != members.height:
        raise ValueError(f"cohort lookup: {members.height - rows.height} cohort neurons are missing from the table")
    layer_rows = table.filter(pl.col("layer").is_in(members["layer"].unique().to_list()))
    mean, sem = _mean_sem(rows[statistic].to_numpy().astype(np.float64))
    layer_mean, _ = _mean_sem(layer_rows[statistic].to_numpy().astype(np.float64))
    return {"cohort_mean": mean, "cohort_sem": sem, "layer_mean": layer_mean, "n_cohort": rows.height}


def emergence_step(steps: Iterable[int], values: Iterable[float], fraction: float = 0.9) -> int | None:
    """First step whose value reaches ``fraction`` of the value at the last step (steps in any order);
    None when the final value is not positive (nothing emerges to reach)."""
    s = np.asarray(list(steps), dtype=np.int64)
    v = np.asarray(list(values), dtype=np.float64)
    if s.size == 0 or s.size != v.size:
        raise ValueError(f"emergence_step: need as many values as steps, got {s.size} and {v.size}")
    order = np.argsort(s, kind="stable")
    s, v = s[order], v[order]
    final = v[-1]
    if not (np.isfinite(final) and final > 0):
        return None
    reached = np.flatnonzero(v >= fraction * final)
    return int(s[reached[0]])


# ---------------------------------------------------------------- weights: rows, hashes, drift
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


def cosine_dissimilarity(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise 1 - cos(a_i, b_i) of two [K, d] weight matrices, float64 [K]; a zero row gives NaN."""
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a64.shape != b64.shape:
        raise ValueError(f"cosine_dissimilarity: shapes differ, {a64.shape} vs {b64.shape}")
    norms = np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.einsum("ij,ij->i", a64, b64) / norms
    return 1.0 - np.clip(cos, -1.0, 1.0)


def normalized_drift(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine dissimilarity of each row divided by the layer's mean (so it averages to 1 over the layer)."""
    if np.array_equal(a, b):
        raise CheckpointIntegrityError("normalized_drift: the two weight matrices are identical")
    cd = cosine_dissimilarity(a, b)
    mean = np.nanmean(cd)
    if not mean > 0:
        raise CheckpointIntegrityError("normalized_drift: no row of the layer changed direction (mean drift 0)")
    return cd / mean


def cosine_drift(rows: Mapping[str, np.ndarray], cohort: np.ndarray) -> pl.DataFrame:
    """Per interval between successive revisions (by step): the cohort's normalized drift, mean and SEM, and
    the layer's raw mean cosine dissimilarity. ``rows``: revision -> [K, d] weight rows of one layer; ``cohort``:
    neuron indices. Columns: start, end, start_step, end_step, cohort_ncd_mean, cohort_ncd_sem, layer_cd_mean,
    n_cohort."""
    order = by_step(rows)
    idx = np.asarray(cohort, dtype=np.int64)
    records = []
    for start, end in zip(order, order[1:], strict=False):
        ncd = normalized_drift(rows[start], rows[end])
        mean, sem = _mean_sem(ncd[idx])
        records.append(
            {
                "start": start,
                "end": end,
                "start_step": step_of(start),
                "end_step": step_of(end),
                "cohort_ncd_mean": mean,
                "cohort_ncd_sem": sem,
                "layer_cd_mean": float(np.nanmean(cosine_dissimilarity(rows[start], rows[end]))),
                "n_cohort": int(idx.size),
            }
        )
    return pl.DataFrame(records)


def integrity_problems(hashes: Mapping[str, str], final_revision: str) -> list[str]:
    """One line per defect among checkpoints' weight hashes (revision -> sha256): every group of revisions
    with identical weights, naming them, and saying when the group includes the final revision."""
    groups: dict[str, list[str]] = {}
    for revision, digest in hashes.items():
        groups.setdefault(digest, []).append(revision)
    problems = []
    for digest, members in groups.items():
        if len(members) > 1:
            names = ", ".join(by_step(members) if all(_STEP.match(m) for m in members) else sorted(members))
            what = "equal the final revision" if final_revision in members else "have identical weights"
            problems.append(f"checkpoints {names} {what} (sha256 {digest[:12]})")
    return problems


def check_integrity(hashes: Mapping[str, str], final_revision: str) -> None:
    """Raise :class:`CheckpointIntegrityError` naming every group of checkpoints with identical weights."""
    problems = integrity_problems(hashes, final_revision)
    if problems:
        raise CheckpointIntegrityError("checkpoint integrity: " + "; ".join(problems))


# ---------------------------------------------------------------- correlations
def correlation_with_ci(x: Iterable[float], y: Iterable[float], *, n_boot: int = 2000, seed: int = 0) -> dict:
    """Pearson r and Spearman rho of paired values with percentile bootstrap 95% CIs (pairs resampled with
    replacement, ``default_rng(seed)``; resamples with a constant side are skipped and counted).
    Where a correlation is undefined (fewer than 3 finite pairs, or one side constant) every statistic is None
    and ``undefined`` says why: results are JSON, which has no NaN."""
    xa, ya = np.asarray(list(x), dtype=np.float64), np.asarray(list(y), dtype=np.float64)
    keep = np.isfinite(xa) & np.isfinite(ya)
    xa, ya = xa[keep], ya[keep]
    n = xa.size
    why = (
        f"{n} finite pairs (needs 3)"
        if n < 3
        else "x is constant"
        if np.ptp(xa) == 0
        else "y is constant"
        if np.ptp(ya) == 0
        else None
    )
    if why is not None:
        return {
            "pearson_r": None,
            "pearson_ci": [None, None],
            "spearman_rho": None,
            "spearman_ci": [None, None],
            "n": int(n),
            "n_boot": n_boot,
            "n_boot_used": 0,
            "seed": seed,
            "undefined": why,
        }
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    bx, by = xa[idx], ya[idx]
    ok = (np.ptp(bx, axis=1) > 0) & (np.ptp(by, axis=1) > 0)
    bx, by = bx[ok], by[ok]
    pearson_boot = _rowwise_pearson(bx, by)
    spearman_boot = _rowwise_pearson(_ranks(bx), _ranks(by))
    return {
        "pearson_r": float(sstats.pearsonr(xa, ya).statistic),
        "pearson_ci": np.percentile(pearson_boot, [2.5, 97.5]).tolist() if ok.any() else [None, None],
        "spearman_rho": float(sstats.spearmanr(xa, ya).statistic),
        "spearman_ci": np.percentile(spearman_boot, [2.5, 97.5]).tolist() if ok.any() else [None, None],
        "n": int(n),
        "n_boot": n_boot,
        "n_boot_used": int(ok.sum()),
        "seed": seed,
    }


def _ranks(a: np.ndarray) -> np.ndarray:
    return sstats.rankdata(a, axis=1)


def _rowwise_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    return (a * b).sum(axis=1) / np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
