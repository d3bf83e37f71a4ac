# Training dynamics over checkpoints (paper §2.3 Fig. 2b-d, §6 Fig. 6c-d): cohorts chosen at the final revision,
# followed through every checkpoint; the weight grid read without a forward pass; the integrity gate.


rule train_suite:
    input:
        wikitext="resources/data/wikitext2",
    output:
        directory(trained_suite_path("{model}")),
    log:
        "logs/train_suite/{model}.log",
    benchmark:
        "benchmarks/train_suite/{model}.tsv"
    conda:
        "../../environment.yml"
    threads: 1
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        suite=suite_train_params,
    script:
        "../scripts/train_suite.py"


rule weight_rows:
    input:
        weight_rows_inputs,
    output:
        rows=weight_rows_path("{model}", "{revision}"),
        record=weight_record_path("{model}", "{revision}"),
    log:
        "logs/weight_rows/{model}/{revision}.log",
    benchmark:
        "benchmarks/weight_rows/{model}/{revision}.tsv"
    threads: 1
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        model=model_spec,
        layer=config["training"]["cohorts"]["layer"],
    run:
        run_script("weight_rows.py", input, output, params, wildcards, threads, log)


rule checkpoint_integrity:
    input:
        integrity_inputs,
    output:
        training_path("{model}", "integrity.json"),
    log:
        "logs/checkpoint_integrity/{model}.log",
    benchmark:
        "benchmarks/checkpoint_integrity/{model}.tsv"
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
        training_path("{model}", "cohorts.json"),
    log:
        "logs/cohorts/{model}.log",
    benchmark:
        "benchmarks/cohorts/{model}.tsv"
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
        table=training_path("{model}", "emergence.parquet"),
        summary=training_path("{model}", "emergence.json"),
    log:
        "logs/emergence/{model}.log",
    benchmark:
        "benchmarks/emergence/{model}.tsv"
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
        training_path("{model}", "cosine_drift.parquet"),
    log:
        "logs/cosine_drift/{model}.log",
    benchmark:
        "benchmarks/cosine_drift/{model}.tsv"
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
        table=training_path("{model}", "ablation_vs_wd.parquet"),
        summary=training_path("{model}", "ablation_vs_wd.json"),
    log:
        "logs/ablation_vs_wd/{model}.log",
    benchmark:
        "benchmarks/ablation_vs_wd/{model}.tsv"
    localrule: True
    params:
        model=model_spec_final,
        revisions=ablation_revisions_of,
        training=ablation_vs_wd_params,
    run:
        run_script("ablation_vs_wd.py", input, output, params, wildcards, threads, log)


rule figure2bd:
    input:
        unpack(figure2bd_inputs),
    output:
        b=report(figure2b_path(), caption="../report/figure2b.rst", category="Training"),
        d=report(figure2d_path(), caption="../report/figure2d.rst", category="Training"),
    log:
        "logs/figures/figure2bd.log",
    benchmark:
        "benchmarks/figures/figure2bd.tsv"
    localrule: True
    params:
        models=training_models(),
    run:
        run_script("figure2bd.py", input, output, params, wildcards, threads, log)


rule figure2c:
    input:
        figure2c_inputs,
    output:
        report(figure2c_path(), caption="../report/figure2c.rst", category="Training"),
    log:
        "logs/figures/figure2c.log",
    benchmark:
        "benchmarks/figures/figure2c.tsv"
    localrule: True
    params:
        models=drift_models(),
    run:
        run_script("figure2c.py", input, output, params, wildcards, threads, log)


rule figure6cd:
    input:
        unpack(figure6cd_inputs),
    output:
        report(
            figure6cd_path("{model}"),
            caption="../report/figure6cd.rst",
            category="Training",
        ),
    log:
        "logs/figures/figure6cd/{model}.log",
    benchmark:
        "benchmarks/figures/figure6cd/{model}.tsv"
    localrule: True
    run:
        run_script("figure6cd.py", input, output, params, wildcards, threads, log)


rule pair_signs_over_training:
    input:
        unpack(pair_signs_training_inputs),
    output:
        training_path("{model}", "pair_signs.parquet"),
    log:
        "logs/pair_signs_over_training/{model}.log",
    benchmark:
        "benchmarks/pair_signs_over_training/{model}.tsv"
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


rule figure6b:
    input:
        training_path("{model}", "pair_signs.parquet"),
    output:
        report(
            figure6b_path("{model}"),
            caption="../report/figure6b.rst",
            category="Training",
        ),
    log:
        "logs/figures/figure6b/{model}.log",
    benchmark:
        "benchmarks/figures/figure6b/{model}.tsv"
    localrule: True
    run:
        run_script("figure6b.py", input, output, params, wildcards, threads, log)
