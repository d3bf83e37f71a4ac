rule score_clean:
    input:
        model=model_dir,
        data=score_data,
    output:
        json=paths.clean("{model}", "{revision}", "{benchmark}"),
        per_item=paths.clean_items("{model}", "{revision}", "{benchmark}"),
    log:
        paths.log_file("score_clean", "{model}/{revision}/{benchmark}"),
    benchmark:
        paths.benchmark_file("score_clean", "{model}/{revision}/{benchmark}")
    group:
        allocation("score_clean")
    threads: 1
    resources:
        **GPU_SITE,
        gpu=1,
        mem_mb=job_mem_mb("score_clean"),
        runtime=job_runtime("score_clean"),
    params:
        model=model_spec,
        evaluation=evaluation_params,
    run:
        run_script("score.py", input, output, params, wildcards, threads, log)


rule matched_search:
    input:
        unpack(matched_search_inputs),
    output:
        paths.matched_search("{model}", "{revision}", "{scope}", "{percent}"),
    log:
        paths.log_file("matched_search", "{model}/{revision}/{scope}/p{percent}"),
    benchmark:
        paths.benchmark_file("matched_search", "{model}/{revision}/{scope}/p{percent}")
    priority: UNLOCKS_ABLATIONS
    group:
        allocation("matched_search")
    threads: 1
    resources:
        **GPU_SITE,
        gpu=1,
        mem_mb=job_mem_mb("matched_search"),
        runtime=job_runtime("matched_search"),
    params:
        model=model_spec,
        evaluation=evaluation_params,
        search=search_spec,
    run:
        run_script("matched_search.py", input, output, params, wildcards, threads, log)


rule score_ablation:
    input:
        unpack(ablation_inputs),
    output:
        json=paths.ablation("{model}", "{revision}", WILDCARD_CONDITION, "{benchmark}"),
        per_item=paths.ablation_items(
            "{model}", "{revision}", WILDCARD_CONDITION, "{benchmark}"
        ),
    log:
        paths.log_file(
            "score_ablation",
            "{model}/{revision}/{scope}/{selector}/p{percent}/t{trial}/{benchmark}",
        ),
    benchmark:
        paths.benchmark_file(
            "score_ablation",
            "{model}/{revision}/{scope}/{selector}/p{percent}/t{trial}/{benchmark}",
        )
    group:
        allocation("score_ablation")
    threads: 1
    resources:
        **GPU_SITE,
        gpu=1,
        mem_mb=job_mem_mb("score_ablation"),
        runtime=job_runtime("score_ablation"),
    params:
        model=model_spec,
        evaluation=evaluation_params,
        condition=condition_spec,
    run:
        run_script("score.py", input, output, params, wildcards, threads, log)


rule aggregate_scores:
    input:
        condition_results,
    output:
        paths.aggregate("{model}", "{revision}", "{benchmark}"),
    log:
        paths.log_file("aggregate_scores", "{model}/{revision}/{benchmark}"),
    benchmark:
        paths.benchmark_file("aggregate_scores", "{model}/{revision}/{benchmark}")
    localrule: True
    run:
        run_script(
            "aggregate_scores.py", input, output, params, wildcards, threads, log
        )
