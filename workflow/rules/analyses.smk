# The mechanism analyses (paper §3 token level, §5-7): pair sample, pair signs, POS tags and surprisal, the
# single-neuron case study, layerwise NN share vs single-layer ablation error, and Figures 3d, 5, 6a, 7.


rule pair_sample:
    input:
        unpack(pair_sample_inputs),
    output:
        directory(pair_sample_path("{model}", "{revision}")),
    log:
        "logs/pair_sample/{model}/{revision}.log",
    benchmark:
        "benchmarks/pair_sample/{model}/{revision}.tsv"
    threads: 1
    resources:
        gpu=1,
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        model=model_spec,
        pairs=pair_sample_params,
    run:
        run_script("pair_sample.py", input, output, params, wildcards, threads, log)


rule pair_signs:
    input:
        sample=pair_sample_path("{model}", "{revision}"),
        neurons=neurons_path("{model}", "{revision}"),
    output:
        signs=pair_signs_path("{model}", "{revision}"),
        composition=pair_composition_path("{model}", "{revision}"),
    log:
        "logs/pair_signs/{model}/{revision}.log",
    benchmark:
        "benchmarks/pair_signs/{model}/{revision}.tsv"
    threads: 1
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        signs=pair_signs_params,
    run:
        run_script("pair_signs.py", input, output, params, wildcards, threads, log)


rule pos_tags:
    input:
        unpack(pos_tags_inputs),
    output:
        pos_tags_path("{model}"),
    log:
        "logs/pos_tags/{model}.log",
    benchmark:
        "benchmarks/pos_tags/{model}.tsv"
    threads: 1
    params:
        pos=pos_tags_params,
    run:
        run_script("pos_tags.py", input, output, params, wildcards, threads, log)


rule pos_surprisal:
    input:
        unpack(pos_surprisal_inputs),
    output:
        pos_surprisal_path("{model}", "{revision}"),
    log:
        "logs/pos_surprisal/{model}/{revision}.log",
    benchmark:
        "benchmarks/pos_surprisal/{model}/{revision}.tsv"
    threads: 1
    params:
        pos=pos_surprisal_params,
    run:
        run_script("pos_surprisal.py", input, output, params, wildcards, threads, log)


rule case_study:
    input:
        unpack(case_study_inputs),
    output:
        pairs=case_study_path("{model}", "{revision}", "figure5_pairs.csv"),
        all_pairs=case_study_path("{model}", "{revision}", "figure5_all_pairs.parquet"),
        robustness=case_study_path("{model}", "{revision}", "figure5_robustness.json"),
    log:
        "logs/case_study/{model}/{revision}.log",
    benchmark:
        "benchmarks/case_study/{model}/{revision}.tsv"
    threads: 1
    params:
        case=case_study_params,
    run:
        run_script("case_study.py", input, output, params, wildcards, threads, log)


rule layerwise:
    input:
        unpack(layerwise_inputs),
    output:
        table=layerwise_path("{model}", "{revision}", "layerwise_nn_vs_error.parquet"),
        correlations=layerwise_path(
            "{model}", "{revision}", "layerwise_correlations.json"
        ),
    log:
        "logs/layerwise/{model}/{revision}.log",
    benchmark:
        "benchmarks/layerwise/{model}/{revision}.tsv"
    threads: 1
    params:
        layerwise=layerwise_params,
    run:
        run_script("layerwise.py", input, output, params, wildcards, threads, log)


rule figure3d:
    input:
        figure3d_inputs,
    output:
        report(
            analysis_figure_path("figure3d"),
            caption="../report/figure3d.rst",
            category="Mechanism",
        ),
    log:
        "logs/figures/figure3d.log",
    benchmark:
        "benchmarks/figures/figure3d.tsv"
    localrule: True
    params:
        figure=figure3d_params,
    run:
        run_script("figure3d.py", input, output, params, wildcards, threads, log)


rule figure5:
    input:
        unpack(figure5_inputs),
    output:
        report(
            analysis_figure_path("figure5"),
            caption="../report/figure5.rst",
            category="Mechanism",
        ),
    log:
        "logs/figures/figure5.log",
    benchmark:
        "benchmarks/figures/figure5.tsv"
    localrule: True
    run:
        run_script("figure5.py", input, output, params, wildcards, threads, log)


rule figure6a:
    input:
        figure6a_inputs,
    output:
        report(
            analysis_figure_path("figure6a"),
            caption="../report/figure6a.rst",
            category="Mechanism",
        ),
    log:
        "logs/figures/figure6a.log",
    benchmark:
        "benchmarks/figures/figure6a.tsv"
    localrule: True
    params:
        figure=figure6a_params,
    run:
        run_script("figure6a.py", input, output, params, wildcards, threads, log)


rule figure7:
    input:
        unpack(figure7_inputs),
    output:
        report(
            analysis_figure_path("figure7"),
            caption="../report/figure7.rst",
            category="Mechanism",
        ),
    log:
        "logs/figures/figure7.log",
    benchmark:
        "benchmarks/figures/figure7.tsv"
    localrule: True
    params:
        figure=figure7_params,
    run:
        run_script("figure7.py", input, output, params, wildcards, threads, log)
