rule paired_stats:
    input:
        unpack(paired_inputs),
    output:
        paths.paired("{model}", "{revision}", "{benchmark}"),
    log:
        paths.log_file("paired_stats", "{model}/{revision}/{benchmark}"),
    benchmark:
        paths.benchmark_file("paired_stats", "{model}/{revision}/{benchmark}")
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
        md=paths.replication_md(),
        json=paths.replication_json(),
        html=report(
            paths.replication_html(),
            caption="../report/replication.rst",
            category="Replication",
        ),
    log:
        paths.log_file("replication_table"),
    benchmark:
        paths.benchmark_file("replication_table")
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
        site=directory(paths.explorer("{model}", "{revision}")),
        bundle=report(
            paths.explorer_bundle("{model}", "{revision}"),
            caption="../report/explorer.rst",
            category="Neuron explorer",
        ),
    log:
        paths.log_file("explorer", "{model}/{revision}"),
    benchmark:
        paths.benchmark_file("explorer", "{model}/{revision}")
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        model=model_spec,
        spec=explorer_params,
    run:
        run_script("explorer.py", input, output, params, wildcards, threads, log)


rule sign_cases:
    input:
        unpack(sign_cases_inputs),
    output:
        paths.sign_cases("{model}", "{revision}"),
    log:
        paths.log_file("sign_cases", "{model}/{revision}"),
    benchmark:
        paths.benchmark_file("sign_cases", "{model}/{revision}")
    group:
        allocation("sign_cases")
    threads: 2
    resources:
        **GPU_SITE,
        gpu=1,
        mem_mb=job_mem_mb("sign_cases"),
        runtime=job_runtime("sign_cases"),
    params:
        model=model_spec,
        spec=sign_cases_params,
    run:
        run_script("sign_cases.py", input, output, params, wildcards, threads, log)
