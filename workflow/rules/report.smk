rule paired_stats:
    input:
        unpack(paired_inputs),
    output:
        paired_path("{model}", "{revision}", "{benchmark}"),
    log:
        "logs/paired_stats/{model}/{revision}/{benchmark}.log",
    benchmark:
        "benchmarks/paired_stats/{model}/{revision}/{benchmark}.tsv"
    conda:
        "../../environment.yml"
    params:
        conditions=paired_conditions,
        resamples=config["report"]["resamples"],
        seed=config["report"]["seed"],
    script:
        "../scripts/paired_stats.py"


rule replication_table:
    input:
        replication_inputs,
    output:
        md=replication_path("md"),
        json=replication_path("json"),
        html=report(
            replication_path("html"),
            caption="../report/replication.rst",
            category="Replication",
        ),
    log:
        "logs/replication_table.log",
    benchmark:
        "benchmarks/replication_table.tsv"
    conda:
        "../../environment.yml"
    params:
        run=replication_run,
    script:
        "../scripts/replication_table.py"


rule explorer:
    input:
        unpack(explorer_inputs),
    output:
        site=directory(explorer_path("{model}", "{revision}")),
        bundle=report(
            explorer_bundle_path("{model}", "{revision}"),
            caption="../report/explorer.rst",
            category="Neuron explorer",
        ),
    log:
        "logs/explorer/{model}/{revision}.log",
    benchmark:
        "benchmarks/explorer/{model}/{revision}.tsv"
    conda:
        "../../environment.yml"
    params:
        model=model_spec,
        spec=explorer_params,
    script:
        "../scripts/explorer.py"
