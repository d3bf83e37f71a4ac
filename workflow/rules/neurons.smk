rule collect_activations:
    input:
        model=model_dir,
        wikitext=wikitext_dir,
    output:
        directory("resources/activations/{model}/{revision}"),
    log:
        "logs/collect_activations/{model}/{revision}.log",
    benchmark:
        "benchmarks/collect_activations/{model}/{revision}.tsv"
    conda:
        "../../environment.yml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        model=model_spec,
        collect=collect_params,
    script:
        "../scripts/collect_activations.py"


rule neuron_stats:
    input:
        shards="resources/activations/{model}/{revision}",
    output:
        "results/{model}/{revision}/neurons.parquet",
    log:
        "logs/neuron_stats/{model}/{revision}.log",
    benchmark:
        "benchmarks/neuron_stats/{model}/{revision}.tsv"
    conda:
        "../../environment.yml"
    threads: 2
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        model=model_spec,
        stats=stats_params,
    script:
        "../scripts/neuron_stats.py"
