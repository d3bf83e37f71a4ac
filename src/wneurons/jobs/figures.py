"""Jobs of ``workflow/rules/figures.smk``: every figure of the paper, read from the result files its rule names and
drawn by :mod:`wneurons.report.figures` (which takes frames and dicts, except figures 3 and 4, which read their
aggregated result files themselves)."""

from __future__ import annotations

import polars as pl

from wneurons.store import io


def figure1_job(inputs: dict, out_path: str, params: dict) -> None:
    """Figure 1 from the shards and neuron tables of the figure model (index 0) and its ReLU contrast (index 1);
    each member's nonlinearity is its family's, as recorded in its neuron table."""
    from wneurons.lm.registry import family_spec
    from wneurons.report.figures import figure1

    def member(i: int) -> tuple:
        # The family recorded from the loaded model when its neuron table was made (the config key is optional).
        nonlinearity = family_spec(io.read_parquet_metadata(inputs[f"neurons{i}"])["family"]).nonlinearity
        return inputs[f"shards{i}"], pl.read_parquet(inputs[f"neurons{i}"]), nonlinearity, params["models"][i]

    shards, stats, nonlinearity, label = member(0)
    contrast = None
    if len(params["models"]) > 1:
        c_shards, c_stats, c_nonlinearity, c_label = member(1)
        contrast = (c_shards, c_stats, params["layer"], c_nonlinearity, c_label)
    figure1(
        shards,
        stats,
        layer=params["layer"],
        neuron=params["neuron"],
        nonlinearity=nonlinearity,
        out_path=out_path,
        contrast=contrast,
        label=label,
    )


def figure2a_job(neuron_tables: list[str], models: list[str], out_path: str, layer: int) -> None:
    """Figure 2a: WD distribution of one layer for every model (final revisions)."""
    from wneurons.report.figures import figure2a

    figure2a(
        {m: pl.read_parquet(p) for m, p in zip(models, neuron_tables, strict=True)}, layer=layer, out_path=out_path
    )


def figure2bd_job(tables: list[str], summaries: list[str], models: list[str], out_b: str, out_d: str) -> None:
    """Figures 2b and 2d from every model's emergence table and summary."""
    from wneurons.report.figures import figure2b, figure2d

    by_model = {m: pl.read_parquet(p) for m, p in zip(models, tables, strict=True)}
    summary = {m: io.read_json(p) for m, p in zip(models, summaries, strict=True)}
    figure2b(by_model, summary, out_path=out_b)
    figure2d(by_model, summary, out_path=out_d)


def figure2c_job(tables: list[str], models: list[str], out_path: str) -> None:
    """Figure 2c from every model's cosine-drift table."""
    from wneurons.report.figures import figure2c

    figure2c({m: pl.read_parquet(p) for m, p in zip(models, tables, strict=True)}, out_path=out_path)


def figure3_job(ppl_path: str, blimp_path: str, tse_path: str, out_path: str) -> None:
    """Figure 3 of one checkpoint from its aggregated ppl / BLiMP / TSE results."""
    from wneurons.report.figures import figure3

    figure3(ppl_path, blimp_path, tse_path, out_path)


def capability_figure_job(inputs: dict, out_path: str, label: str) -> None:
    """Grammar vs capability drop per condition (beside Fig. 3c) from the aggregated BLiMP / TSE / capability
    results of one checkpoint."""
    from wneurons.report.figures.capability import capability_figure

    results = {k: io.read_json(inputs[k]) for k in ("blimp", "tse", "capability")}
    capability_figure(results["blimp"], results["tse"], results["capability"], out_path, label=label)


def figure3d_job(table_path: str, out_path: str, params: dict) -> pl.DataFrame:
    """Figure 3d from the POS surprisal table; returns the rows drawn."""
    from wneurons.report.figures import figure3d

    return figure3d(pl.read_parquet(table_path), out_path, min_tokens=params["min_tokens"], label=params["label"])


def figure4_job(blimp_path: str, tse_path: str, out_path: str) -> None:
    """Figure 4 of one checkpoint from its aggregated BLiMP / TSE results (the layer-group conditions)."""
    from wneurons.report.figures import figure4

    figure4(blimp_path, tse_path, out_path)


def figure5_job(inputs: dict, out_path: str) -> list[int]:
    """Figure 5 from the case study's top pairs, all pairs' distances and robustness summary."""
    from wneurons.report.figures import figure5

    return figure5(
        pl.read_csv(inputs["pairs"]), pl.read_parquet(inputs["all_pairs"]), io.read_json(inputs["robustness"]), out_path
    )


def _composition(path: str, params: dict) -> pl.DataFrame:
    """The pair-sign composition rows of the figure's selection (``md_percent``, ``top_k``)."""
    return pl.read_parquet(path).filter(
        (pl.col("percent") == float(params["md_percent"])) & (pl.col("top_k") == params["top_k"])
    )


def figure6a_job(composition_path: str, out_path: str, params: dict) -> pl.DataFrame:
    """Figure 6a from the pair-sign composition per layer; returns the rows drawn."""
    from wneurons.report.figures import figure6a

    return figure6a(_composition(composition_path, params), out_path, label=params["label"])


def figure6b_job(table: str, model: str, out_path: str) -> None:
    """Figure 6b of one model from its pair-sign table over training."""
    from wneurons.report.figures import figure6b

    figure6b(pl.read_parquet(table), model=model, out_path=out_path)


def figure6cd_job(table: str, summary: str, model: str, out_path: str) -> None:
    """Figure 6c-d of one model from its ablation-vs-WD table."""
    from wneurons.report.figures import figure6cd

    figure6cd(pl.read_parquet(table), io.read_json(summary), model=model, out_path=out_path)


def figure7_job(inputs: dict, out_path: str, params: dict) -> pl.DataFrame:
    """Figure 7 from the composition and the layerwise table and correlations; returns the overlay drawn."""
    from wneurons.report.figures import figure7

    return figure7(
        _composition(inputs["composition"], params),
        pl.read_parquet(inputs["layerwise"]),
        io.read_json(inputs["correlations"]),
        out_path,
        label=params["label"],
        ablation_percent=params["ablation_percent"],
    )
