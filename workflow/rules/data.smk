rule fetch_data:
    output:
        directory(paths.dataset("{dataset}")),
    log:
        paths.log_file("fetch_data", "{dataset}"),
    benchmark:
        paths.benchmark_file("fetch_data", "{dataset}")
    localrule: True
    params:
        spec=dataset_spec,
    run:
        run_script("fetch_data.py", input, output, params, wildcards, threads, log)


rule convert_gguf_model:
    input:
        gguf_input,
    output:
        directory(paths.converted_model("{model}")),
    log:
        paths.log_file("convert_gguf_model", "{model}"),
    benchmark:
        paths.benchmark_file("convert_gguf_model", "{model}")
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        gguf=gguf_spec,
    run:
        run_script(
            "convert_gguf_model.py", input, output, params, wildcards, threads, log
        )


# ---------------------------------------------------------------- the capability suite's lm-eval tasks
rule capability_tasks:
    input:
        wikitext=paths.dataset("wikitext2"),
    output:
        directory(paths.capability_tasks("wikitext2")),
    log:
        paths.log_file("capability_tasks"),
    benchmark:
        paths.benchmark_file("capability_tasks")
    localrule: True
    run:
        run_script(
            "capability_tasks.py", input, output, params, wildcards, threads, log
        )


# Needs the hub: a local rule, so it runs on the submit host (compute nodes read the staged cache offline).
rule stage_lmeval_tasks:
    output:
        directory(paths.capability_tasks("hub")),
    log:
        paths.log_file("stage_lmeval_tasks"),
    benchmark:
        paths.benchmark_file("stage_lmeval_tasks")
    localrule: True
    params:
        tasks=hub_tasks_params,
    run:
        run_script(
            "stage_lmeval_tasks.py", input, output, params, wildcards, threads, log
        )


# Hub models (wneurons.lm.hub_staging): each revision staged on this machine (where the internet is) before any job reads
# it, pinned to its commit and verified (only the shards weight rows read, for a step read by nothing else); a
# revision's weights pruned once every job reading them is done.
rule stage_model:
    input:
        staging_turn,
    output:
        staged_manifest("{model}", "{revision}"),
    log:
        paths.log_file("stage_model", "{model}/{revision}"),
    benchmark:
        paths.benchmark_file("stage_model", "{model}/{revision}")
    localrule: True
    params:
        hub=hub_source,
        needs=staging_needs,
    run:
        run_script("stage_model.py", input, output, params, wildcards, threads, log)


# hub.stage_ahead: a revision's turn to be staged comes once the revision stage_ahead + 1 places before it is pruned.
rule staging_turn:
    input:
        staging_turn_inputs,
    output:
        touch(paths.staging_turn("{model}", "{revision}", STAGING)),
    localrule: True


rule stage_hub_models:
    input:
        staged_manifests,
    localrule: True


rule prune_staged:
    input:
        unpack(prune_inputs),
    output:
        paths.pruned_record("{model}", "{revision}", STAGING),
    log:
        paths.log_file("prune_staged", "{model}/{revision}"),
    benchmark:
        paths.benchmark_file("prune_staged", "{model}/{revision}")
    localrule: True
    run:
        run_script("prune_staged.py", input, output, params, wildcards, threads, log)
