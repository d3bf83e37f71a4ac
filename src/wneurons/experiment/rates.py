"""Measured rates: what a finished (or partly finished) run's jobs did per second, for the planner to use in place of
its stated assumptions (:mod:`wneurons.experiment.allocations`).

Every rule that runs a model writes a Snakemake ``benchmark:`` table whose ``s`` column is the job's wall seconds
(:func:`wneurons.experiment.paths.benchmark_file`). A job's rate is the planner's own measure of its work
(:func:`allocations.job_work`: FLOP, 2 x parameters x tokens, for the model's jobs; bytes for the statistics and the
weight rows) over those seconds: TFLOP/s as the planner counts them, or bytes/s. The seconds are the job's own, so a
job that loaded its allocation's model (or imported torch) counts that too: a rate measured on short jobs is low,
and plans long. Rates are kept per (rule, precision, device name): each model's (its jobs' work over their
seconds) and the median over the models. The device is the GPU name the job's result records in its provenance
(``device_name``), else one another job of the same checkpoint recorded, else "unknown".

    python perf/measured_rates.py results --configfile config/demo.yaml   # writes results/rates.json

A site file's ``rates: results/rates.json`` makes the planner use them (:class:`allocations.Site`).
"""

from __future__ import annotations

import datetime
import re
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

from wneurons.experiment import allocations, paths, workload
from wneurons.experiment.grid import Condition
from wneurons.experiment.measured_rates import UNITS, UNKNOWN_DEVICE, MeasuredRates  # noqa: F401 (re-exported)
from wneurons.store import io

RATES_FILE = "rates.json"
REPOSITORY = Path(__file__).resolve().parents[3]


def unit_of(rule: str) -> str:
    return "B/s" if rule in allocations.CPU_MEMBERS else "TFLOP/s"


def benchmark_templates(root: str | Path = REPOSITORY) -> dict[str, str]:
    """{rule: its benchmark table's path below the benchmarks root, with wildcards} of every allocated rule (a
    ``group: allocation(...)`` rule: those that run a model), read from ``workflow/rules/*.smk`` under ``root``,
    e.g. ``{"score_clean": "score_clean/{model}/{revision}/{benchmark}"}``."""
    templates = {}
    for path in sorted((Path(root) / "workflow" / "rules").glob("*.smk")):
        for block in re.split(r"^rule ", path.read_text(), flags=re.MULTILINE)[1:]:
            rule = block.split(":", 1)[0].strip()
            found = re.search(r"^    benchmark:\n(.*?)(?=^    \w+:)", block, flags=re.MULTILINE | re.DOTALL)
            if "allocation(" not in block or found is None or "paths.benchmark_file(" not in found.group(1):
                continue
            folder, *stem = re.findall(r'"([^"]*)"', found.group(1))
            templates[rule] = "/".join([folder, *stem])
    return templates


def parse_benchmark_path(relative: str, templates: dict[str, str]) -> tuple[str, dict[str, str]] | None:
    """(rule, wildcards) of a benchmark table's path below the benchmarks root (``.tsv`` left off), or None."""
    for rule, template in templates.items():
        pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(template))
        match = re.fullmatch(pattern, relative)
        if match:
            return rule, match.groupdict()
    return None


def benchmark_seconds(path: str | Path) -> float | None:
    """Mean wall seconds (column ``s``) of a benchmark table's rows; None when it has none."""
    lines = Path(path).read_text().splitlines()
    if len(lines) < 2:
        return None
    column = lines[0].split("\t").index("s")
    values = [float(line.split("\t")[column]) for line in lines[1:] if line.strip()]
    return sum(values) / len(values) if values else None


def result_provenance(rule: str, w: dict[str, str]) -> dict:
    """The provenance of the result a job of ``rule`` wrote (under the current roots), {} where it writes none
    or it is missing: the JSON results' ``provenance``, the tables' parquet metadata."""
    model, revision = w["model"], w["revision"]
    try:
        if rule in ("collect_activations", "neuron_stats"):  # the statistics record the collection's device
            return io.read_parquet_metadata(paths.neurons(model, revision))
        if rule == "sign_cases":
            return io.read_parquet_metadata(paths.sign_cases(model, revision))
        if rule == "score_clean":
            path = paths.clean(model, revision, w["benchmark"])
        elif rule == "score_ablation":
            condition = Condition(w["scope"], w["selector"], w["percent"], int(w["trial"]))
            path = paths.ablation(model, revision, condition, w["benchmark"])
        elif rule == "matched_search":
            path = paths.matched_search(model, revision, w["scope"], w["percent"])
        elif rule == "pair_sample":
            path = f"{paths.pair_sample(model, revision)}/index.json"
        elif rule == "weight_rows":
            path = paths.weight_record(model, revision)
        else:
            return {}
        return io.read_json(path).get("provenance") or {}
    except (OSError, ValueError, KeyError):
        return {}


def benchmarks_dir(results_dir: str | Path) -> Path:
    """Where a run's benchmark tables are: inside its results_dir, or beside it for the default layout
    (``results/`` and ``benchmarks/`` in the working directory, :class:`paths.Roots`)."""
    results_dir = Path(results_dir)
    inside = results_dir / paths.BENCHMARK_LOGS
    beside = results_dir.parent / paths.BENCHMARK_LOGS
    return beside if not inside.is_dir() and results_dir.name == paths.RESULTS and beside.is_dir() else inside


@dataclass(frozen=True)
class Job:
    """One measured job: its rule and wildcards, precision and device, the planner's work and the seconds."""

    rule: str
    wildcards: dict
    precision: str
    device: str
    work: float
    seconds: float
    tokens: float


def measured_jobs(config: dict, results_dir: str | Path, root: str | Path = ".") -> list[Job]:
    """Every finished job of an allocated rule under ``results_dir`` with a benchmark table and work to measure
    (``config``: the run's; ``root``: its working directory, where the capability suite is staged)."""
    tables = benchmarks_dir(results_dir)
    templates = benchmark_templates()
    tsvs = {}
    for tsv in sorted(tables.rglob("*.tsv")):
        parsed = parse_benchmark_path(str(tsv.relative_to(tables).with_suffix("")), templates)
        if parsed is not None and parsed[1]["model"] in config["models"]:
            tsvs[tsv] = parsed
    # Statistics split by layer range: neuron_stats only joined the parts, so its seconds measure no statistics;
    # each part did the statistics' work over its layers, and is measured as the statistics (the planner's rate).
    split = {(w["model"], w["revision"]) for rule, w in tsvs.values() if rule == allocations.STATS_PART}
    found = []
    with paths.roots_of(config | {"results_dir": str(results_dir)}):
        for tsv, (rule, w) in tsvs.items():
            if rule == "neuron_stats" and (w["model"], w["revision"]) in split:
                continue
            seconds = benchmark_seconds(tsv)
            work = allocations.job_work(config, rule, w, root)
            if not seconds or seconds <= 0 or work <= 0:
                continue
            rule = allocations.rate_rule(rule)
            found.append((rule, w, result_provenance(rule, w), seconds, work))
    # A job that records no device ran on its checkpoint's allocation, whose other jobs may name it.
    device_at = {(w["model"], w["revision"]): p["device_name"] for _, w, p, _, _ in found if p.get("device_name")}
    jobs = []
    for rule, w, prov, seconds, work in found:
        device = prov.get("device_name") or device_at.get((w["model"], w["revision"]), UNKNOWN_DEVICE)
        # The CPU members' rate does not depend on a precision: keyed by the one the planner looks up.
        precision = prov.get("precision") if rule not in allocations.CPU_MEMBERS else None
        precision = precision or allocations.precision_of(config, rule)
        tokens = workload.tokens_of(config, rule, w, root)
        jobs.append(Job(rule, w, precision, device, work, seconds, tokens))
    return jobs


def summarize(config: dict, jobs: list[Job]) -> list[dict]:
    """One entry per (rule, precision, device): its unit, each model's rate (its jobs' work over their seconds),
    tokens/s, parameters, jobs and seconds, and the median of the models' rates."""
    by_key: dict[tuple[str, str, str], dict[str, list[Job]]] = {}
    for job in jobs:
        by_key.setdefault((job.rule, job.precision, job.device), {}).setdefault(job.wildcards["model"], []).append(job)
    entries = []
    for (rule, precision, device), models in sorted(by_key.items()):
        unit = unit_of(rule)
        per_model = {}
        for model, js in sorted(models.items()):
            seconds = sum(j.seconds for j in js)
            per_model[model] = {
                "rate": sum(j.work for j in js) / seconds / UNITS[unit],
                "tokens_per_s": sum(j.tokens for j in js) / seconds,
                "params_b": config["models"][model]["params_b"],
                "jobs": len(js),
                "seconds": round(seconds, 3),
            }
        median = statistics.median(m["rate"] for m in per_model.values())
        entry = {"rule": rule, "precision": precision, "device": device, "unit": unit, "median": median}
        entries.append(entry | {"models": per_model})
    return entries


def _commit(root: str | Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def measure(config: dict, results_dir: str | Path, root: str | Path = ".") -> dict:
    """The rates file's content for one run: the entries (:func:`summarize`), when the measured jobs ended (the
    newest benchmark table), the working directory's commit, and when this was written."""
    jobs = measured_jobs(config, results_dir, root)
    tables = benchmarks_dir(results_dir)
    newest = max((t.stat().st_mtime for t in tables.rglob("*.tsv")), default=None)
    when = (
        None if newest is None else datetime.datetime.fromtimestamp(newest, datetime.UTC).isoformat(timespec="seconds")
    )
    return {
        "measured_until": when,
        "written": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": _commit(root),
        "results_dir": str(results_dir),
        "rates": summarize(config, jobs),
    }


def write_rates(path: str | Path, content: dict) -> None:
    io.write_json(path, content)
