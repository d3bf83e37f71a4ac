# Training dynamics over checkpoints (paper §2.3 Fig. 2b-d, §6 Fig. 6c-d): cohorts chosen at the final revision,
# followed through every checkpoint; the weight grid read without a forward pass; the integrity gate (Figures 2b-d,
# 6b-d: figures.smk).


rule train_suite:
    input:
        wikitext=paths.dataset("wikitext2"),
    output:
        directory(paths.trained_suite("{model}")),
    log:
        paths.log_file("train_suite", "{model}"),
    benchmark:
        paths.benchmark_file("train_suite", "{model}")
    threads: 1
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        suite=suite_train_params,
    run:
        run_script("train_suite.py", input, output, params, wildcards, threads, log)


rule weight_rows:
    input:
        model_dir,
    output:
        rows=paths.weight_rows("{model}", "{revision}"),
        record=paths.weight_record("{model}", "{revision}"),
    log:
        paths.log_file("weight_rows", "{model}/{revision}"),
    benchmark:
        paths.benchmark_file("weight_rows", "{model}/{revision}")
    group:
        allocation("weight_rows")
    threads: 1
    resources:
        **GPU_SITE,
        mem_mb=job_mem_mb("weight_rows"),
        runtime=job_runtime("weight_rows"),
    params:
        model=model_spec,
        layer=config["training"]["cohorts"]["layer"],
    run:
        run_script("weight_rows.py", input, output, params, wildcards, threads, log)


rule checkpoint_integrity:
    input:
        integrity_inputs,
    output:
        paths.integrity("{model}"),
    log:
        paths.log_file("checkpoint_integrity", "{model}"),
    benchmark:
        paths.benchmark_file("checkpoint_integrity", "{model}")
    localrule: True
    params:
        final_revision=final_revision_of,
        mode=config["training"]["integrity"],
    run:
        run_script(
            "checkpoint_integrity.py",
            input,
            output,
            params,
            wildcards,
            threads,
            log,
        )


rule cohorts:
    input:
        unpack(cohorts_inputs),
    output:
        paths.cohorts("{model}"),
    log:
        paths.log_file("cohorts", "{model}"),
    benchmark:
        paths.benchmark_file("cohorts", "{model}")
    localrule: True
    params:
        model=model_spec_final,
        settings=config["training"]["cohorts"],
    run:
        run_script("cohorts.py", input, output, params, wildcards, threads, log)


rule emergence:
    input:
        unpack(emergence_inputs),
    output:
        table=paths.emergence_table("{model}"),
        summary=paths.emergence_summary("{model}"),
    log:
        paths.log_file("emergence", "{model}"),
    benchmark:
        paths.benchmark_file("emergence", "{model}")
    localrule: True
    params:
        model=model_spec_final,
        tokens_per_step=tokens_per_step,
        revisions=dynamics_revisions_of,
        training=training_params,
    run:
        run_script("emergence.py", input, output, params, wildcards, threads, log)


rule cosine_drift:
    input:
        unpack(cosine_drift_inputs),
    output:
        paths.cosine_drift("{model}"),
    log:
        paths.log_file("cosine_drift", "{model}"),
    benchmark:
        paths.benchmark_file("cosine_drift", "{model}")
    localrule: True
    params:
        model=model_spec_final,
        revisions=weight_grid_of,
    run:
        run_script("cosine_drift.py", input, output, params, wildcards, threads, log)


rule ablation_vs_wd:
    input:
        unpack(ablation_vs_wd_inputs),
    output:
        table=paths.ablation_vs_wd_table("{model}"),
        summary=paths.ablation_vs_wd_summary("{model}"),
    log:
        paths.log_file("ablation_vs_wd", "{model}"),
    benchmark:
        paths.benchmark_file("ablation_vs_wd", "{model}")
    localrule: True
    params:
        model=model_spec_final,
        revisions=ablation_revisions_of,
        training=ablation_vs_wd_params,
    run:
        run_script("ablation_vs_wd.py", input, output, params, wildcards, threads, log)


rule pair_signs_over_training:
    input:
        unpack(pair_signs_training_inputs),
    output:
        paths.pair_signs_training("{model}"),
    log:
        paths.log_file("pair_signs_over_training", "{model}"),
    benchmark:
        paths.benchmark_file("pair_signs_over_training", "{model}")
    localrule: True
    params:
        model=model_spec_final,
        revisions=dynamics_revisions_of,
        signs=pair_signs_training_params,
    run:
        run_script(
            "pair_signs_over_training.py",
            input,
            output,
            params,
            wildcards,
            threads,
            log,
        )
