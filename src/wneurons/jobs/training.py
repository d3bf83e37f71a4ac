"""Jobs of ``workflow/rules/training.smk``, the training dynamics (Fig. 2b-d, 6b-d): the demo's checkpoint suite,
weight rows and the integrity gate, the cohorts chosen at the final revision, and their emergence, cosine drift,
ablation error and pair signs over checkpoints (their figures' jobs: :mod:`wneurons.jobs.figures`).

The science lives in :mod:`wneurons.core.dynamics` and :mod:`wneurons.core.uncertainty`; revisions and weight
files in :mod:`wneurons.store.checkpoints`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import polars as pl

from wneurons.experiment.paths import STAGED_MANIFEST
from wneurons.jobs.base import HUB, STAGED, model_location, model_provenance, staged_manifest_of
from wneurons.store import io

log = logging.getLogger("wneurons")


def train_suite_job(wikitext_dir: str, out_dir: str, train: dict, revisions: list[str], max_tokens: int | None) -> dict:
    """Train the miniature GPT-NeoX suite on the tail of WikiText-2 test, saved at every configured revision."""
    from wneurons.lm.train_suite import train_checkpoint_suite
    from wneurons.store.checkpoints import step_of
    from wneurons.store.data import WIKITEXT_TEST, wikitext_split

    test_path = Path(wikitext_dir) / WIKITEXT_TEST
    manifest = train_checkpoint_suite(
        out_dir,
        wikitext_split(wikitext_dir, "test"),
        [step_of(r) for r in revisions],
        train,
        statistics_max_tokens=max_tokens,
        text_sha256=io.sha256_file(test_path),
    )
    log.info("suite trained in %.1f s: %d checkpoints", manifest["seconds"], len(manifest["checkpoints"]))
    return manifest


def weight_rows_job(spec: dict, layer: int, rows_path: str, record_path: str) -> dict:
    """One layer's pre-nonlinearity weight rows (float32 [neurons, d_in], bias excluded) of one revision, no
    forward pass, and the revision's weight hashes (all weight files; these rows) for the integrity gate. A hub
    revision is read from its staged directory, its digest from the manifest (the hub's sha256 of each file,
    verified when staged): no request to the hub."""
    from wneurons.lm.registry import family_spec
    from wneurons.store import checkpoints

    manifest = staged_manifest_of(spec)
    if manifest is not None:
        directory = Path(spec[STAGED])
        weights_sha256, names = manifest["weights_sha256"], [Path(n).name for n in manifest["weight_files"]]
    else:
        source, location, _ = model_location(spec)
        if source == HUB:
            raise ValueError(f"models.{spec['name']}: a hub revision's weights are read from its staged directory only")
        directory = Path(location)
        files = checkpoints.checkpoint_weight_files(directory)
        weights_sha256, names = io.sha256_files(files), [f.name for f in files]
    # No model is loaded here: without a configured family, the checkpoint's own config.json names it.
    family = family_spec(spec["family"] or io.read_json(directory / "config.json")["model_type"])
    candidates = [checkpoints.weight_tensor_name(path, family.projection, layer) for path in family.layers_paths]
    tensor, rows = checkpoints.read_weight_rows(directory, candidates, transpose=family.conv1d)
    record = {
        "revision": spec["revision"],
        "tensor": tensor,
        "shape": list(rows.shape),
        "rows_sha256": checkpoints.rows_sha256(rows),
        "weights_sha256": weights_sha256,
        "weight_files": names,
        "provenance": io.provenance(**model_provenance(spec)),
    }
    with io.atomic_output(rows_path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, rows)  # to the handle: given a path, np.save would append ".npy" to the temporary name
    io.write_json(record_path, record)
    return record


def cohorts_job(
    spec: dict, final_neurons: str, out_path: str, settings: dict, md_pairs_path: str | None = None
) -> dict:
    """The cohorts of one model, chosen at its final revision (WD from the neuron table; MD from the pair sample
    when given, else the table's test-split MD)."""
    from wneurons.core.dynamics import choose_cohorts

    md_values = (
        pl.read_parquet(md_pairs_path).select("layer", "neuron", pl.col("md_pairs").alias("md"))
        if md_pairs_path
        else None
    )
    cohorts = choose_cohorts(pl.read_parquet(final_neurons), settings, md_values=md_values)
    out = {
        "model": spec["name"],
        "revision": spec["revision"],
        "settings": settings,
        "md_source": "pair sample" if md_pairs_path else "neurons table (test split)",
        "cohorts": cohorts,
        "provenance": io.provenance(**model_provenance(spec), neurons_sha256=io.sha256_file(final_neurons)),
    }
    io.write_json(out_path, out)
    return out


def integrity_job(record_paths: list[str], final_revision: str, out_path: str, mode: str) -> dict:
    """The checkpoint integrity gate: every revision's weight hash, from its weight record (``weight_rows.json``)
    or, for a hub model, its staged manifest (``STAGED.json``, :func:`wneurons.lm.hub_integrity.staged_integrity`, which
    records the commits too); identical checkpoints (or one equal to the final revision) raise, naming them
    (``mode="error"``), or are recorded as dropped (``mode="drop"``)."""
    from wneurons.core.dynamics import CheckpointIntegrityError, integrity_drops, integrity_problems
    from wneurons.lm.hub_integrity import staged_integrity

    if record_paths and all(Path(p).name == STAGED_MANIFEST for p in record_paths):
        staged = {io.read_json(p)["revision"]: str(Path(p).parent) for p in record_paths}
        return staged_integrity(staged, final_revision, mode, out_path)
    records = [io.read_json(p) for p in record_paths]
    hashes = {r["revision"]: r["weights_sha256"] for r in records}
    problems = integrity_problems(hashes, final_revision)
    if problems and mode == "error":
        raise CheckpointIntegrityError("checkpoint integrity: " + "; ".join(problems))
    dropped = integrity_drops(hashes, final_revision) if problems else []
    if dropped:
        log.warning("checkpoint integrity: dropping %s (%s)", dropped, "; ".join(problems))
    out = {"hashes": hashes, "problems": problems, "dropped": dropped, "mode": mode}
    io.write_json(out_path, out)
    return out


def _kept(revisions: list[str], paths: list[str], integrity_path: str) -> list[tuple[str, str]]:
    dropped = set(io.read_json(integrity_path)["dropped"])
    return [(r, p) for r, p in zip(revisions, paths, strict=True) if r not in dropped]


def emergence_job(
    spec: dict,
    revisions: list[str],
    inputs: dict,
    out_path: str,
    summary_path: str,
    params: dict,
    tokens_per_step: int | None = None,
) -> pl.DataFrame:
    """Fig. 2b/2d table: per revision (by step) the WD cohort's mean and SEM, the layer mean, clean TSE (micro
    and macro over subtasks) and BLiMP; summary: the emergence step and the WD-vs-TSE correlations."""
    from wneurons.core import dynamics, uncertainty
    from wneurons.store import checkpoints

    cohort = io.read_json(inputs["cohorts"])["cohorts"]["wd_layer"]
    kept = dict(_kept(revisions, list(range(len(revisions))), inputs["integrity"]))
    rows = []
    for i, revision in enumerate(revisions):
        if revision not in kept:
            continue
        stats = dynamics.cohort_statistic(
            pl.read_parquet(inputs["neurons"][i], columns=["layer", "neuron", "wd"]), cohort
        )
        tse = io.read_json(inputs["tse"][i])["scores"]
        blimp = io.read_json(inputs["blimp"][i])["scores"]
        step = checkpoints.step_of(revision)
        rows.append(
            {
                "revision": revision,
                "step": step,
                "tokens": step * tokens_per_step if tokens_per_step else None,
                "cohort_wd_mean": stats["cohort_mean"],
                "cohort_wd_sem": stats["cohort_sem"],
                "layer_wd_mean": stats["layer_mean"],
                "n_cohort": stats["n_cohort"],
                "tse_overall": tse["overall"],
                "tse_macro": float(np.mean(list(tse["by_task"].values()))),
                "blimp_overall": blimp["overall"],
            }
        )
    table = pl.DataFrame(rows, schema_overrides={"tokens": pl.Int64}).sort("step")
    emergence = dynamics.emergence_step(table["step"], table["cohort_wd_mean"], params["emergence_fraction"])
    corr = {
        target: uncertainty.correlation_with_ci(
            table["cohort_wd_mean"], table[target], n_boot=params["bootstrap"], seed=params["seed"]
        )
        for target in ("tse_overall", "tse_macro", "blimp_overall")
    }
    summary = {
        "model": spec["name"],
        "emergence_fraction": params["emergence_fraction"],
        "emergence_step": emergence,
        "emergence_tokens": emergence * tokens_per_step if emergence is not None and tokens_per_step else None,
        "final_cohort_wd": table["cohort_wd_mean"][-1],
        "final_layer_wd": table["layer_wd_mean"][-1],
        "n_cohort": int(table["n_cohort"][-1]),
        "correlations": corr,
        "dropped": io.read_json(inputs["integrity"])["dropped"],
        "provenance": io.provenance(model=spec["name"], revisions=table["revision"].to_list(), **params),
    }
    # The fraction in the footer too: the claims table (C3) reads the table alone.
    io.write_parquet(
        out_path,
        table,
        metadata={"model": spec["name"], "cohort": "wd_layer", "emergence_fraction": params["emergence_fraction"]},
    )
    io.write_json(summary_path, summary)
    return table


def cosine_drift_job(spec: dict, revisions: list[str], inputs: dict, out_path: str) -> pl.DataFrame:
    """Fig. 2c table: the WD cohort's normalized cosine drift between successive weight-grid revisions."""
    from wneurons.core import dynamics

    cohort = io.read_json(inputs["cohorts"])["cohorts"]["wd_layer"]
    ((layer, neurons),) = cohort["layers"].items()
    kept = _kept(revisions, list(inputs["rows"]), inputs["integrity"])
    rows = {r: io.load_npy(p, mmap_mode="r") for r, p in kept}
    table = dynamics.cosine_drift(rows, np.asarray(neurons, dtype=np.int64))
    io.write_parquet(
        out_path,
        table,
        metadata=io.provenance(model=spec["name"], layer=int(layer), cohort="wd_layer", revisions=[r for r, _ in kept]),
    )
    return table


def ablation_vs_wd_job(
    spec: dict, revisions: list[str], inputs: dict, out_path: str, summary_path: str, params: dict
) -> pl.DataFrame:
    """Fig. 6c-d table: at each revision with checkpoint ablations, the final revision's WD cohort (all layers)
    ablated, its random and matched controls; error increase (clean - ablated accuracy) on BLiMP and TSE vs the
    cohort's mean WD there. The ablations must have used the final revision's cohort (``cohort_source``)."""
    from wneurons.core import dynamics, uncertainty
    from wneurons.experiment.grid import condition_key
    from wneurons.store import checkpoints

    cohort = io.read_json(inputs["cohorts"])["cohorts"]["wd_all_layers"]
    if cohort["percent"] != params["percent"]:
        raise ValueError(
            f"training.cohorts.all_layers_percent is {cohort['percent']} but the checkpoint ablations compared are "
            f"at {params['percent']}% (ablation.checkpoint_percents[0]): the x axis must be the ablated cohort's WD"
        )
    key_of = {s: condition_key("all", s, params["percent"]) for s in ("wasserstein", "random", "matched")}
    kept = dict(_kept(revisions, list(range(len(revisions))), inputs["integrity"]))
    rows = []
    for i, revision in enumerate(revisions):
        if revision not in kept:
            continue
        table = pl.read_parquet(inputs["neurons"][i], columns=["layer", "neuron", "wd"])
        wd = dynamics.cohort_statistic(table, cohort)
        for benchmark in ("blimp", "tse"):
            result = io.read_json(inputs[benchmark][i])
            for selector, key in key_of.items():
                condition = result["conditions"].get(key)
                if condition is None:
                    raise ValueError(f"{inputs[benchmark][i]}: no condition {key} (checkpoint ablations configured?)")
                if condition.get("cohort_source") != spec["revision"]:
                    raise ValueError(
                        f"{inputs[benchmark][i]}: condition {key} was not selected from the final revision's table "
                        f"(cohort_source {condition.get('cohort_source')!r}); set ablation.checkpoint_selection: final"
                    )
                rows.append(
                    {
                        "revision": revision,
                        "step": checkpoints.step_of(revision),
                        "benchmark": benchmark,
                        "selector": selector,
                        "cohort_wd_mean": wd["cohort_mean"],
                        "cohort_wd_sem": wd["cohort_sem"],
                        "error_increase": result["clean"]["overall"] - condition["scores"]["overall"],
                        "error_increase_sem": condition.get("sem", {}).get("overall"),
                        "n_trials": condition.get("n_trials", 1),
                    }
                )
    out = pl.DataFrame(rows, schema_overrides={"error_increase_sem": pl.Float64}).sort("benchmark", "selector", "step")
    corr = {}
    for (benchmark, selector), group in out.group_by(["benchmark", "selector"], maintain_order=True):
        corr[f"{benchmark}/{selector}"] = uncertainty.correlation_with_ci(
            group["cohort_wd_mean"], group["error_increase"], n_boot=params["bootstrap"], seed=params["seed"]
        )
    io.write_parquet(out_path, out, metadata={"model": spec["name"], "cohort": "wd_all_layers"})
    io.write_json(
        summary_path,
        {
            "model": spec["name"],
            "percent": params["percent"],
            "correlations": corr,
            "provenance": io.provenance(model=spec["name"], **params),
        },
    )
    return out


def pair_signs_over_training_job(
    spec: dict, revisions: list[str], inputs: dict, out_path: str, params: dict
) -> pl.DataFrame:
    """Fig. 6b table: at every revision, the NN / PN / PP shares of the top-k pairs of the final revision's MD
    cohort (the same pair positions at every revision: one pair sample, seeded), mean and SEM across neurons."""
    from wneurons.core import dynamics, pairs
    from wneurons.store import checkpoints

    cohort = io.read_json(inputs["cohorts"])["cohorts"]["md_layer"]
    selected = dynamics.cohort_frame(cohort)
    kept = _kept(revisions, list(inputs["signs"]), inputs["integrity"])
    frames = []
    for revision, path in kept:
        signs = pl.read_parquet(path).with_columns(pl.col("layer").cast(pl.Int64), pl.col("neuron").cast(pl.Int64))
        comp = pairs.composition(signs, selected, params["top_k"], cohort["percent"])
        frames.append(comp.with_columns(revision=pl.lit(revision), step=pl.lit(checkpoints.step_of(revision))))
    table = pl.concat(frames, how="diagonal_relaxed").sort("step")
    io.write_parquet(
        out_path, table, metadata=io.provenance(model=spec["name"], cohort="md_layer", top_k=params["top_k"])
    )
    return table
