# The mechanism analyses (paper §3 token level, §5-7): pair sample, pair signs, POS tags and surprisal, the
# single-neuron case study, layerwise NN share vs single-layer ablation error (Figures 3d, 5, 6a, 7: figures.smk).


rule pair_sample:
    input:
        unpack(pair_sample_inputs),
    output:
        directory(paths.pair_sample("{model}", "{revision}")),
    log:
        paths.log_file("pair_sample", "{model}/{revision}"),
    benchmark:
        paths.benchmark_file("pair_sample", "{model}/{revision}")
    group:
        allocation("pair_sample")
    threads: 1
    resources:
        **GPU_SITE,
        gpu=1,
        mem_mb=job_mem_mb("pair_sample"),
        runtime=job_runtime("pair_sample"),
    params:
        model=model_spec,
        pairs=pair_sample_params,
    run:
        run_script("pair_sample.py", input, output, params, wildcards, threads, log)


rule pair_signs:
    input:
        sample=paths.pair_sample("{model}", "{revision}"),
        neurons=paths.neurons("{model}", "{revision}"),
    output:
        signs=paths.pair_signs("{model}", "{revision}"),
        composition=paths.pair_composition("{model}", "{revision}"),
    log:
        paths.log_file("pair_signs", "{model}/{revision}"),
    benchmark:
        paths.benchmark_file("pair_signs", "{model}/{revision}")
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
        paths.pos_tags("{model}"),
    log:
        paths.log_file("pos_tags", "{model}"),
    benchmark:
        paths.benchmark_file("pos_tags", "{model}")
    threads: 1
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        pos=pos_tags_params,
    run:
        run_script("pos_tags.py", input, output, params, wildcards, threads, log)


rule pos_surprisal:
    input:
        unpack(pos_surprisal_inputs),
    output:
        paths.pos_surprisal("{model}", "{revision}"),
    log:
        paths.log_file("pos_surprisal", "{model}/{revision}"),
    benchmark:
        paths.benchmark_file("pos_surprisal", "{model}/{revision}")
    threads: 1
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        pos=pos_surprisal_params,
    run:
        run_script("pos_surprisal.py", input, output, params, wildcards, threads, log)


rule case_study:
    input:
        unpack(case_study_inputs),
    output:
        pairs=paths.case_study_pairs("{model}", "{revision}"),
        all_pairs=paths.case_study_all_pairs("{model}", "{revision}"),
        robustness=paths.case_study_robustness("{model}", "{revision}"),
    log:
        paths.log_file("case_study", "{model}/{revision}"),
    benchmark:
        paths.benchmark_file("case_study", "{model}/{revision}")
    threads: 1
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        case=case_study_params,
    run:
        run_script("case_study.py", input, output, params, wildcards, threads, log)


rule layerwise:
    input:
        unpack(layerwise_inputs),
    output:
        table=paths.layerwise_table("{model}", "{revision}"),
        correlations=paths.layerwise_correlations("{model}", "{revision}"),
    log:
        paths.log_file("layerwise", "{model}/{revision}"),
    benchmark:
        paths.benchmark_file("layerwise", "{model}/{revision}")
    threads: 1
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        layerwise=layerwise_params,
    run:
        run_script("layerwise.py", input, output, params, wildcards, threads, log)
