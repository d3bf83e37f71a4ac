rule collect_activations:
    input:
        model=model_dir,
        wikitext=wikitext_dir,
    output:
        shards_output(),
    log:
        "logs/collect_activations/{model}/{revision}.log",
    benchmark:
        "benchmarks/collect_activations/{model}/{revision}.tsv"
    threads: 2
    resources:
        gpu=1,
        mem_mb=mem_mb,
        runtime=runtime,
        disk_mb=collect_disk_mb,
    params:
        model=model_spec,
        collect=collect_params,
    run:
        run_script(
            "collect_activations.py", input, output, params, wildcards, threads, log
        )


rule neuron_stats:
    input:
        shards=shards_path("{model}", "{revision}"),
    output:
        neurons_path("{model}", "{revision}"),
    log:
        "logs/neuron_stats/{model}/{revision}.log",
    benchmark:
        "benchmarks/neuron_stats/{model}/{revision}.tsv"
    threads: 2
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        model=model_spec,
        stats=stats_params,
    run:
        run_script("neuron_stats.py", input, output, params, wildcards, threads, log)


rule keep_activations:
    input:
        shards=shards_path("{model}", "{revision}"),
    output:
        directory(kept_shards_path("{model}", "{revision}")),
    log:
        "logs/keep_activations/{model}/{revision}.log",
    benchmark:
        "benchmarks/keep_activations/{model}/{revision}.tsv"
    localrule: True
    run:
        run_script(
            "keep_activations.py", input, output, params, wildcards, threads, log
        )
