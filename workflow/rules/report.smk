rule paired_stats:
    input:
        unpack(paired_inputs),
    output:
        paired_path("{model}", "{revision}", "{benchmark}"),
    log:
        "logs/paired_stats/{model}/{revision}/{benchmark}.log",
    benchmark:
        "benchmarks/paired_stats/{model}/{revision}/{benchmark}.tsv"
    localrule: True
    params:
        conditions=paired_conditions,
        resamples=config["report"]["resamples"],
        seed=config["report"]["seed"],
    run:
        run_script("paired_stats.py", input, output, params, wildcards, threads, log)


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
    localrule: True
    params:
        run=replication_run,
    run:
        run_script(
            "replication_table.py", input, output, params, wildcards, threads, log
        )


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
    params:
        model=model_spec,
        spec=explorer_params,
    run:
        run_script("explorer.py", input, output, params, wildcards, threads, log)
