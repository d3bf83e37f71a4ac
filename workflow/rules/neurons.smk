rule collect_activations:
    input:
        model=model_dir,
        wikitext=paths.dataset("wikitext2"),
    output:
        shards_output(),
    log:
        paths.log_file("collect_activations", "{model}/{revision}"),
    benchmark:
        paths.benchmark_file("collect_activations", "{model}/{revision}")
    priority: UNLOCKS_ABLATIONS
    group:
        allocation("collect_activations")
    threads: 2
    resources:
        **GPU_SITE,
        gpu=1,
        mem_mb=job_mem_mb("collect_activations"),
        runtime=job_runtime("collect_activations"),
        disk_mb=collect_disk_mb,
        activations_mb=collect_disk_mb,
    params:
        model=model_spec,
        collect=collect_params,
    run:
        run_script(
            "collect_activations.py", input, output, params, wildcards, threads, log
        )


# Where one statistics job over every layer would not fit the site's max_runtime, the planner splits it by layer
# range ("0-15"): each part an allocated job of its own, over the same shards; neuron_stats then joins them
# (common.smk: stats_parts). Elsewhere no part is asked for and the DAG is as without them.
rule neuron_stats_part:
    input:
        shards=paths.shards("{model}", "{revision}"),
    output:
        temp(paths.neurons_part("{model}", "{revision}", "{layers}")),
    log:
        paths.log_file("neuron_stats_part", "{model}/{revision}/{layers}"),
    benchmark:
        paths.benchmark_file("neuron_stats_part", "{model}/{revision}/{layers}")
    priority: UNLOCKS_ABLATIONS
    group:
        allocation("neuron_stats_part")
    threads: 2
    resources:
        **GPU_SITE,
        gpu=0,
        mem_mb=job_mem_mb("neuron_stats_part"),
        runtime=job_runtime("neuron_stats_part"),
    params:
        model=model_spec,
        stats=stats_part_params,
    run:
        run_script(
            "neuron_stats_part.py", input, output, params, wildcards, threads, log
        )


# With neurons.scratch_dir, a revision whose shards no later job reads is collected by this job itself, into
# node-local scratch (its inputs then are the model and WikiText-2; common.smk: collects_in_scratch). Split by
# layer range, it joins the parts' tables (the same file, byte for byte).
rule neuron_stats:
    input:
        unpack(neuron_stats_inputs),
    output:
        paths.neurons("{model}", "{revision}"),
    log:
        paths.log_file("neuron_stats", "{model}/{revision}"),
    benchmark:
        paths.benchmark_file("neuron_stats", "{model}/{revision}")
    priority: UNLOCKS_ABLATIONS
    group:
        allocation("neuron_stats")
    threads: 2
    resources:
        **GPU_SITE,
        gpu=neuron_stats_gpus,
        mem_mb=neuron_stats_mem_mb,
        runtime=neuron_stats_runtime,
    params:
        model=model_spec,
        stats=stats_params,
    run:
        run_script("neuron_stats.py", input, output, params, wildcards, threads, log)


rule keep_activations:
    input:
        shards=paths.shards("{model}", "{revision}"),
    output:
        directory(paths.kept_shards("{model}", "{revision}")),
    log:
        paths.log_file("keep_activations", "{model}/{revision}"),
    benchmark:
        paths.benchmark_file("keep_activations", "{model}/{revision}")
    localrule: True
    run:
        run_script(
            "keep_activations.py", input, output, params, wildcards, threads, log
        )
