"""What a claim check reads and returns: the :class:`Run` (a run's models, their result files and the config facts
claims need), the :class:`Outcome` of one check, the verdicts, and the readers and rules several checks share.

Verdicts: holds / does not hold / not enough data / not run. A check that lacks its file raises :class:`NotRun`;
one whose units are too few says "not enough data at n = …" (:func:`too_few`) with the threshold it needs.
A difference the claim needs to exist is decided both ways (:func:`difference_verdict`): it holds when its test
rejects "no difference" on the claimed side, and does not hold when its (1 - 2 alpha) interval lies inside the
claim's equivalence :class:`Margin` (two one-sided tests at alpha: "does not hold (equivalent within ±m)");
only an interval that covers 0 and straddles a margin is "not enough data".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from wneurons.core.equivalence import equivalence_interval, inside_margin
from wneurons.core.uncertainty import MIN_CORRELATION_POINTS, correlation_with_ci, items_to_detect

HOLDS, FAILS, NO_DATA, NOT_RUN = "holds", "does not hold", "not enough data", "not run"
VERDICTS = (HOLDS, FAILS, NO_DATA, NOT_RUN)

PYTHIA = ("pythia-70m", "pythia-160m", "pythia-410m", "pythia-1b", "pythia-1.4b", "pythia-2.8b", "pythia-6.9b",
          "pythia-12b")  # fmt: skip
LMS = ("llama-3.1-8b", "mistral-7b-v0.3", "qwen3-8b-base")
ALPHA = 0.01  # C11's threshold; other tests use 0.05 where the spec says so
# The fewest units each kind of claim needs (docs/analyses.md §F, "Thresholds"):
MIN_CHECKPOINTS = 4  # a trajectory over training (C3 emergence, C21 NN share): step 0, two early, the final one
MIN_INTERVALS = 3  # C4: a first interval and at least two later ones
MIN_LAYERS = 8  # layerwise claims (C23-C25): fewer layers cannot place an early peak or a correlation
MIN_GROUPS = 3  # C14: a peak needs groups on both sides of it


class NotRun(Exception):
    """The files a check needs are not in this run; the message says which."""


@dataclass
class Outcome:
    ours: str
    verdict: str
    ci: str = ""
    test: str = ""
    sources: list[str] = field(default_factory=list)
    note: str = ""  # what decided the verdict when it is not the plain rule, e.g. "equivalent within ±1 pt"
    margin: str = ""  # the equivalence margin(s) the verdict used, with their units
    alpha: float | None = None  # the claim's test level


@dataclass(frozen=True)
class Margin:
    """An equivalence margin: differences within ±``value`` (the row's units: accuracy fractions) count as none,
    decided by two one-sided tests at ``alpha``; ``reason`` says why this size (docs/analyses.md §F)."""

    value: float
    alpha: float
    reason: str

    def words(self) -> str:
        return f"±{fmt(100 * self.value)} pt"


@dataclass(frozen=True)
class Part:
    """One compared difference of a claim: its verdict, whether it was decided by equivalence, its text."""

    verdict: str
    equivalent: bool
    text: str


def difference_verdict(row: dict, margin: Margin, direction: int = 1) -> Part:
    """The verdict on a paired difference (``drop``) the claim says is non-zero in ``direction`` (+1: above 0):

    - does not hold (equivalent): its (1 - 2 alpha) interval lies inside (-m, m) (TOST at alpha; one trial's
      interval is exact from its discordant counts, the same rule for none, few and many:
      :func:`core.equivalence.equivalence_interval`);
    - holds: the exact test gives p < alpha and the 95% CI excludes 0 on the claimed side;
    - does not hold: p < alpha with the difference on the other side;
    - not enough data otherwise (the interval covers 0 and reaches past a margin).
    """
    lo, hi, how = equivalence_interval(row, margin.alpha)
    text = f"TOST ±{fmt(100 * margin.value)} pt at α = {margin.alpha:g}: [{fmt(100 * lo)}, {fmt(100 * hi)}] ({how})"
    if inside_margin(lo, hi, margin.value):
        return Part(FAILS, True, text + " inside")
    significant = row["p_value"] < margin.alpha
    if significant and direction * row["drop"] < 0:
        return Part(FAILS, False, text)
    if significant and has_ci(row) and direction * row["ci_lo"] > 0 and direction * row["ci_hi"] > 0:
        return Part(HOLDS, False, text)
    return Part(NO_DATA, False, text)


def equivalence_note(parts: dict[str, Part], margin_words: str) -> str:
    """ "equivalent within ±m: <parts>" for the parts decided by equivalence (empty when none was)."""
    named = [name for name, part in parts.items() if part.equivalent]
    return f"equivalent within {margin_words}: {', '.join(named)}" if named else ""


@dataclass
class Run:
    """What a run has: per configured model its family, size and result files; the config facts claims need."""

    models: dict[str, dict]
    config: dict
    data: dict
    root: Path = Path(".")

    def spec(self, model: str) -> dict:
        if model not in self.models:
            raise NotRun(f"{model} is not in this run's config")
        return self.models[model]

    def path(self, model: str, key: str) -> Path:
        """The file ``key`` of ``model``; NotRun naming it when the model or the file is absent."""
        files = self.spec(model)["files"]
        if key not in files or files[key] is None:
            raise NotRun(f"{key} not configured for {model}")
        path = self.root / files[key]
        if not path.exists():
            raise NotRun(f"{files[key]} absent")
        return path

    def json(self, model: str, key: str) -> tuple[dict, str]:
        path = self.path(model, key)
        return json.loads(path.read_text()), self.rel(path)

    def parquet(self, model: str, key: str, columns: tuple[str, ...] = ()) -> tuple[pl.DataFrame, str]:
        path = self.path(model, key)
        frame = pl.read_csv(path) if path.suffix == ".csv" else pl.read_parquet(path)
        if frame.width == 0:  # an analysis that wrote an empty table (no rows, no columns) has nothing to check
            raise NotRun(f"{self.rel(path)} is empty")
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise ValueError(f"{path}: lacks column(s) {', '.join(missing)}")
        return frame, self.rel(path)

    def metadata(self, model: str, key: str) -> dict:
        """The provenance in the footer of the parquet file ``key`` of ``model`` (empty if none)."""
        from wneurons.store.io import read_parquet_metadata

        return read_parquet_metadata(self.path(model, key))

    def family(self, model: str) -> str:
        """The configured family, else the loaded model's as its results recorded it (``family`` is optional in
        the config: the jobs take it from the model)."""
        configured = self.spec(model).get("family")
        if configured:
            return configured
        for key in ("neurons", "blimp", "tse", "ppl"):
            try:
                recorded = (
                    self.metadata(model, key) if key == "neurons" else self.json(model, key)[0].get("provenance", {})
                )
            except NotRun:
                continue
            if recorded.get("family"):
                return recorded["family"]
        raise NotRun(f"{model}: no family configured and none recorded in its results")

    def rel(self, path: Path) -> str:
        try:
            return str(Path(path).relative_to(self.root))
        except ValueError:
            return str(path)


def fmt(x: float | None, digits: int = 3) -> str:
    return "nan" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}g}"


def fmt_ci(lo: float | None, hi: float | None, scale: float = 1.0) -> str:
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return "no CI"
    return f"[{fmt(scale * lo)}, {fmt(scale * hi)}]"


def has_ci(row: dict) -> bool:
    lo, hi = row.get("ci_lo"), row.get("ci_hi")
    return lo is not None and hi is not None and not (math.isnan(lo) or math.isnan(hi))


def items_needed(row: dict, alpha: float, power: float = 0.8) -> str:
    """ "; n ≈ N items would detect it (α, 80% power)" for a paired row that its test does not decide
    (core.uncertainty.items_to_detect, from the row's own CI at its n); empty when it is decided or has no CI."""
    if row["p_value"] < alpha or not has_ci(row):
        return ""
    needed = items_to_detect(row["n"], row["drop"], row["ci_lo"], row["ci_hi"], alpha=alpha, power=power)
    if math.isinf(needed):
        return "; no difference to detect"
    return f"; n ≈ {needed:,} items would detect it (α = {alpha:g}, {power:.0%} power)"


def too_few(ours: str, n: int, unit: str, need: int, sources: list[str]) -> Outcome:
    """The outcome of a check whose units are too few to decide: says n, the unit and what it needs."""
    return Outcome(ours, NO_DATA, test=f"not enough data at n = {n} {unit} (needs {need})", sources=sources)


def ci_verdict(lo: float, hi: float, null: float, direction: int) -> str:
    """holds if the CI excludes ``null`` on the claimed side (direction +1: above), fails on the other side;
    a missing (NaN) CI decides nothing."""
    if direction * (lo - null) > 0 and direction * (hi - null) > 0:
        return HOLDS
    if direction * (lo - null) < 0 and direction * (hi - null) < 0:
        return FAILS
    return NO_DATA


def combine(verdicts: list[str]) -> str:
    """All parts must hold; any part that fails fails the claim; otherwise the weakest part decides."""
    if not verdicts:
        return NO_DATA
    if FAILS in verdicts:
        return FAILS
    if all(v == HOLDS for v in verdicts):
        return HOLDS
    return NOT_RUN if all(v == NOT_RUN for v in verdicts) else NO_DATA


def correlation_verdict(x, y, run: Run, *, at_least: float | None = None, at_most: float | None = None):
    """(verdict, text) of a Pearson correlation over points (checkpoints, layers) with its bootstrap CI
    (core.uncertainty.correlation_with_ci; no CI under MIN_CORRELATION_POINTS points: not enough data).

    ``at_least``: holds when r ≥ at_least and the CI excludes 0 from below, fails when the CI lies below
    at_least. ``at_most`` (a control): holds when |r| ≤ at_most and the CI covers 0, fails when |r| > at_most
    and the CI excludes 0; a constant side (nothing moves) holds for a control, decides nothing for a cohort.
    """
    c = correlation_with_ci(x, y, n_boot=run.config["resamples"], seed=run.config["seed"])
    n = c["n"]
    if n < MIN_CORRELATION_POINTS:
        r = "undefined" if c["pearson_r"] is None else fmt(c["pearson_r"])
        return NO_DATA, f"r = {r} at n = {n} (needs {MIN_CORRELATION_POINTS})"
    if c["pearson_r"] is None:
        constant = "constant" in c["undefined"]
        return (HOLDS if at_most is not None and constant else NO_DATA), f"r undefined ({c['undefined']}, n = {n})"
    r, (lo, hi) = c["pearson_r"], c["pearson_ci"]
    text = f"r = {fmt(r)} {fmt_ci(lo, hi)} (n = {n})"
    if lo is None:
        return NO_DATA, text
    if at_least is not None:
        return (HOLDS if r >= at_least and lo > 0 else FAILS if hi < at_least else NO_DATA), text
    if abs(r) <= at_most and lo <= 0 <= hi:
        return HOLDS, text
    return (FAILS if abs(r) > at_most and not lo <= 0 <= hi else NO_DATA), text


# ---------------------------------------------------------------- readers shared by several claims
def paired(run: Run, model: str, benchmark: str) -> tuple[pl.DataFrame, str]:
    return run.parquet(model, f"paired_{benchmark}", ("reference", "condition", "trial"))


def paired_row(frame: pl.DataFrame, reference: str, condition: str, trial: str | None = None, group=None) -> dict:
    f = frame.filter((pl.col("reference") == reference) & (pl.col("condition") == condition))
    if f.height == 0:
        raise NotRun(f"no paired comparison {reference} -> {condition}")
    if trial is not None:
        f = f.filter(pl.col("trial") == trial)
    else:  # pooled over random trials when there are several, else the only trial
        f = f.filter(pl.col("trial") == ("pooled" if (f["trial"] == "pooled").any() else f["trial"].min()))
    if "group_kind" in f.columns:
        kind, name = group or ("overall", "all")
        f = f.filter((pl.col("group_kind") == kind) & (pl.col("group") == name))
    if f.height != 1:
        raise NotRun(f"no paired row {reference} -> {condition}")
    return f.row(0, named=True)


def top_layer1(run: Run, model: str, percent: float = 1.0, layer: int = 1) -> tuple[pl.DataFrame, str]:
    """The top ``percent``% WD neurons of ``layer`` by the authors' rule (core.selection.top_percent_indices)."""
    from wneurons.core.selection import top_percent_indices

    table, src = run.parquet(model, "neurons", ("layer", "neuron", "wd", "wd_negative", "wd_positive", "frac_negative"))
    rows = table.filter(pl.col("layer") == layer).sort("neuron")
    return rows[top_percent_indices(rows["wd"].to_numpy().astype(np.float64), percent)], src


def figure_setting(run: Run, figure: str, model: str, paper: dict, paper_model: str) -> dict:
    """The paper's settings of a figure's analysis for its paper model; for another model the run's own
    (``run.config["figures"][figure]`` when the run spec passes it), else the paper's."""
    if model == paper_model:
        return paper
    own = run.config.get("figures", {}).get(figure) or {}
    return {k: own.get(k, v) for k, v in paper.items()}
