"""Training dynamics: the same neurons followed over checkpoints (paper §2.3, Fig. 2b-d; §6, Fig. 6b-d).

Cohorts are chosen once, at the model's final revision, and looked up unchanged at every checkpoint:
``wd_top1_layer1`` (top 1% WD of MLP block index 1, Fig. 2b-d), ``wd_top5_all_layers`` (top 5% WD of every layer,
Fig. 6c-d) and ``md_top5_layer1`` (top 5% MD of block index 1, Fig. 6b). Everything here is a pure function of
arrays and tables (no model, no files); checkpoints on disk are :mod:`wneurons.store.checkpoints`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import polars as pl

from wneurons.core.selection import top_percent_indices
from wneurons.core.uncertainty import mean_and_sem
from wneurons.store.checkpoints import STEP_REVISION, by_step, step_of

# The paper's three cohorts (spec D1), as the defaults of config `training.cohorts`.
DEFAULT_COHORTS = {"layer": 1, "wd_percent": 1.0, "all_layers_percent": 5.0, "md_percent": 5.0, "rule": "authors"}


class CheckpointIntegrityError(ValueError):
    """Two checkpoints with identical weights, or a checkpoint equal to the final one."""


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


def cohort_statistic(table: pl.DataFrame, cohort: Mapping, statistic: str = "wd") -> dict:
    """Mean and SEM (ddof=1) of ``statistic`` over a cohort's neurons in one checkpoint's table, and the mean
    over every neuron of the cohort's layers (the layer baseline). NaN statistics (dead neurons) are left out."""
    members = cohort_frame(cohort)
    rows = table.join(members, on=["layer", "neuron"], how="semi")
    if rows.height != members.height:
        raise ValueError(f"cohort lookup: {members.height - rows.height} cohort neurons are missing from the table")
    layer_rows = table.filter(pl.col("layer").is_in(members["layer"].unique().to_list()))
    mean, sem = mean_and_sem(rows[statistic].to_numpy().astype(np.float64))
    layer_mean, _ = mean_and_sem(layer_rows[statistic].to_numpy().astype(np.float64))
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
        mean, sem = mean_and_sem(ncd[idx])
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
            names = ", ".join(by_step(members) if all(STEP_REVISION.match(m) for m in members) else sorted(members))
            what = "equal the final revision" if final_revision in members else "have identical weights"
            problems.append(f"checkpoints {names} {what} (sha256 {digest[:12]})")
    return problems


def integrity_drops(hashes: Mapping[str, str], final_revision: str) -> list[str]:
    """The revisions the gate's drop mode removes, by step: of every group with identical weights, all but the
    final revision when the group has it, else all but the earliest step."""
    groups: dict[str, list[str]] = {}
    for revision, digest in hashes.items():
        groups.setdefault(digest, []).append(revision)
    dropped = []
    for members in groups.values():
        keep = final_revision if final_revision in members else min(members, key=step_of)
        dropped += [m for m in members if m != keep]
    return by_step(dropped)


def check_integrity(hashes: Mapping[str, str], final_revision: str) -> None:
    """Raise :class:`CheckpointIntegrityError` naming every group of checkpoints with identical weights."""
    problems = integrity_problems(hashes, final_revision)
    if problems:
        raise CheckpointIntegrityError("checkpoint integrity: " + "; ".join(problems))
