"""The claims table: :data:`CLAIMS` (one entry per claim of ``docs/analyses.md`` §F) and :func:`claim_rows`.

Each claim names its words, the paper's models and number, and a check that reads the files of one model (or of the
run, for claims over a suite of models). A claim is also checked on every other model of the run (marked "not in
paper") unless it names a number only the paper's model can have (``analogue=False``); claims over a suite check
one model at a time with ``analogue_check``. No claim disappears: a check without its files says "not run".

Each row also says what kind of row it is, for the table's sections: ``applies`` (False with ``not_applicable``,
the reason, when the model cannot have the analysis at all, e.g. a training claim on a model without checkpoints;
its verdict stays "not run"), ``run_fact`` (a claim about the run's setup, C26-C29, not about a model's
neurons) and ``in_run`` (False: a paper model the run does not have).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from wneurons.report.claims.capability import c30_double_dissociation
from wneurons.report.claims.dynamics import (
    c3_emergence,
    c3_emergence_of,
    c4_cosine_drift,
    c4_cosine_drift_of,
    c5_wd_tse_correlation,
    c5_wd_tse_correlation_of,
    c21_nn_over_training,
    c22_ablation_vs_wd,
)
from wneurons.report.claims.facts import c26_one_percent, c27_random_trials, c28_data, c29_splits
from wneurons.report.claims.groups import (
    c14_early_groups,
    c15_cumulative_blimp,
    c16_npi_first_group,
    c17_cumulative_tse,
)
from wneurons.report.claims.pairs import (
    c18_function_words,
    c19_nn_pairs,
    c20_pythia_nn,
    c23_llama_pn,
    c24_layerwise_correlation,
    c25_early_peak,
)
from wneurons.report.claims.perturbation import (
    c6_ppl_doubles_at_2,
    c7_ppl_doubles_at_5,
    c8_random_much_less,
    c9_matched_fraction,
    c10_matched_caption,
    c11_only_wasserstein,
    c12_llama_mistral_more_than_qwen,
    c13_pos_surprisal,
)
from wneurons.report.claims.representation import c1_negative_region, c2_size_max_wd
from wneurons.report.claims.run import LMS, NOT_RUN, PYTHIA, NotRun, Outcome, Run


@dataclass(frozen=True)
class Claim:
    id: str
    claim: str
    models: tuple[str, ...]  # the paper's models; () = one row for the run as a whole
    paper: str
    check: Callable
    per_model: bool = True
    analogue: bool = True  # also checked on configured models the paper did not use
    analogue_check: Callable | None = None  # per-model check of a suite claim (per_model=False)
    needs: str = ""  # what a model must be to have this analysis at all (a key of NEEDS), else "not applicable"


CLAIMS: tuple[Claim, ...] = (
    Claim("C1", "Non-Gaussian structure of Wasserstein neurons: negative region (GELU/SiLU), positive (ReLU)",
          ("pythia-1.4b", "opt-1.3b", *LMS), "qualitative", c1_negative_region),
    Claim("C2", "Larger models have greater max WD", PYTHIA, "figure only", c2_size_max_wd, per_model=False,
          analogue=False),
    Claim("C3", "Top-1% cohort WD emerges within ~25K steps", PYTHIA, "25K steps, 50B tokens", c3_emergence,
          per_model=False, analogue_check=c3_emergence_of, needs="checkpoints"),
    Claim("C4", "Cohort changes more than the layer average early, less later", PYTHIA, "ncd > 1 then < 1",
          c4_cosine_drift, per_model=False, analogue_check=c4_cosine_drift_of, needs="checkpoints"),
    Claim("C5", "Cohort WD correlates strongly with TSE over checkpoints", PYTHIA, "strongly", c5_wd_tse_correlation,
          per_model=False, analogue_check=c5_wd_tse_correlation_of, needs="checkpoints"),
    Claim("C6", "Perplexity doubles at 2% W perturbation", LMS[:2], "×2 at 2%", c6_ppl_doubles_at_2),
    Claim("C7", "Perplexity doubles at 5% (Qwen)", LMS[2:], "×2 at 5%", c7_ppl_doubles_at_5, analogue=False),
    Claim("C8", "Random controls raise perplexity much less", LMS, "qualitative", c8_random_much_less),
    Claim("C9", "1% W matched only by m% lowest-WD", LMS, "Mistral 50%, Llama 35%, Qwen 20%", c9_matched_fraction),
    Claim("C10", "Matched control used for benchmarks (Fig. 3c caption)", LMS, "Llama 40%, Mistral 50%, Qwen 20%",
          c10_matched_caption, analogue=False),
    Claim("C11", "Only 1% W (not random, not matched) gives large BLiMP and TSE drops", LMS, "qualitative",
          c11_only_wasserstein),
    Claim("C12", "Llama and Mistral degrade more than Qwen", LMS, "qualitative", c12_llama_mistral_more_than_qwen,
          per_model=False, analogue=False),
    Claim("C13", "Excess surprisal on DET, PUNCT, AUX, PART; not NOUN, VERB, ADJ, ADV", LMS[:1], "qualitative",
          c13_pos_surprisal),
    Claim("C14", "Early layer group gives the largest BLiMP error increase, esp. ellipsis and S-V agreement", LMS[:1],
          "qualitative", c14_early_groups),
    Claim("C15", "Cumulative BLiMP error grows monotonically", LMS[:1], "qualitative", c15_cumulative_blimp),
    Claim("C16", "NPI licensing error +20% from the first 4 layers alone", LMS[:1], "20%", c16_npi_first_group),
    Claim("C17", "Cumulative TSE error grows monotonically across all classes", LMS[:1], "qualitative",
          c17_cumulative_tse),
    Claim("C18", "Neuron 5176's top-10 pairs are mostly function words", ("pythia-1.4b",), "10 pairs",
          c18_function_words),
    Claim("C19", "8 of the top 10 pairs are NN", ("pythia-1.4b",), "8/10", c19_nn_pairs),
    Claim("C20", "NN ≥ 30% in every layer except layer 1; most in layer 2; PP rare", ("pythia-1.4b",), "≥ 30%",
          c20_pythia_nn),
    Claim("C21", "In layer 2 NN share rises early in training; PN falls", ("pythia-1.4b",), "qualitative",
          c21_nn_over_training, needs="checkpoints"),
    Claim("C22", "5% cohort ablation error correlates very strongly with cohort WD; controls do not", ("pythia-1.4b",),
          "very strongly", c22_ablation_vs_wd, needs="checkpoints"),
    Claim("C23", "PN dominates all layers; NN lower than Pythia; NN elevated early", LMS[:1], "qualitative",
          c23_llama_pn),
    Claim("C24", "NN share correlates with single-layer 1% W error; PN, PP weak or opposite", LMS[:1], "qualitative",
          c24_layerwise_correlation),
    Claim("C25", "Normalized NN, BLiMP and TSE error share an early-layer peak", LMS[:1], "qualitative",
          c25_early_peak),
    Claim("C26", "The intervention touches ≈ 1% of neurons per layer", (), "1%", c26_one_percent),
    Claim("C27", "Random controls: 10 trials", (), "10", c27_random_trials, per_model=False),
    Claim("C28", "BLiMP 67 × 1,000 pairs, 13 categories; TSE ~350K pairs, 3 families", (), "67k, 13, ~350K", c28_data,
          per_model=False),
    Claim("C29", "WD/MD on WikiText-2 test; perplexity on validation", (), "—", c29_splits),
    Claim("C30", "Double dissociation: W hurts BLiMP/TSE more than matched; matched hurts the capability suite more",
          LMS, "qualitative (v2)", c30_double_dissociation),
)  # fmt: skip


def has_checkpoints(run: Run, model: str) -> bool:
    """Whether ``model`` has training checkpoints in the run: its spec's ``checkpoints`` when the run spec gives
    them, else whether its emergence table exists (the workflow makes one for every model with checkpoints and
    builds the claims table after it)."""
    spec = run.models.get(model, {})
    if "checkpoints" in spec:
        return bool(spec["checkpoints"])
    emergence = spec.get("files", {}).get("emergence")
    return emergence is not None and (run.root / emergence).exists()


# What a model must be for an analysis to apply at all -> (test, why not).
NEEDS: dict[str, tuple[Callable[[Run, str], bool], str]] = {
    "checkpoints": (has_checkpoints, "{model} has no training checkpoints in this run"),
}


def not_applicable(claim: Claim, run: Run, model: str) -> str:
    """Why ``claim`` cannot apply to ``model`` of the run (empty when it can, or the model is not in the run)."""
    if not claim.needs or model not in run.models:
        return ""
    test, why = NEEDS[claim.needs]
    return "" if test(run, model) else why.format(model=model)


def _targets(claim: Claim, run: Run) -> list[tuple[str, Callable, bool]]:
    """(row label model, check taking (run) or (run, model), whether the check is per model) for one claim."""
    if not claim.per_model:
        label = "(run)" if not claim.models else "+".join(_short(claim.models))
        rows = [(label, claim.check, False)]
        if claim.analogue_check is not None:
            rows += [(m, claim.analogue_check, True) for m in run.models if m not in claim.models]
        return rows
    paper = list(claim.models)
    extra = [m for m in run.models if m not in paper] if (claim.analogue or not paper) else []
    return [(m, claim.check, True) for m in paper + extra]


def claim_rows(run: Run) -> list[dict]:
    """One row per claim and model (paper models first, then the run's other models); never drops a claim.
    ``verdict`` is one of VERDICTS; ``note`` what decided it when not the plain rule (e.g. "equivalent within
    ±1 pt: blimp W−matched"); ``margin`` and ``alpha`` the equivalence margin and test level the claim used;
    ``applies``/``not_applicable``, ``run_fact`` and ``in_run`` (the row's model, or one of a suite's, is in the
    run) say which section of the table the row belongs to."""
    rows = []
    for claim in CLAIMS:
        for model, check, per_model in _targets(claim, run):
            try:
                outcome = check(run, model) if per_model else check(run)
            except NotRun as why:
                outcome = Outcome(str(why), NOT_RUN)
            in_paper = not per_model or model in claim.models or not claim.models
            why_not = not_applicable(claim, run, model) if per_model and outcome.verdict == NOT_RUN else ""
            in_run = (
                model in run.models if per_model else not claim.models or any(m in run.models for m in claim.models)
            )
            rows.append(
                {
                    "id": claim.id,
                    "claim": claim.claim,
                    "model": model if in_paper else f"{model} (not in paper)",
                    "paper": claim.paper,
                    "ours": outcome.ours,
                    "ci": outcome.ci,
                    "test": outcome.test,
                    "verdict": outcome.verdict,
                    "note": outcome.note,
                    "margin": outcome.margin,
                    "alpha": outcome.alpha,
                    "sources": outcome.sources,
                    "applies": not why_not,
                    "not_applicable": why_not,
                    "run_fact": not claim.models,
                    "in_run": in_run,
                }
            )
    return rows


def _short(models: tuple[str, ...]) -> list[str]:
    if models == PYTHIA:
        return ["pythia-70m…12b"]
    return list(models)
