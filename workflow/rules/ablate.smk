rule score_clean:
    input:
        model=model_dir,
        data=score_data,
    output:
        json=clean_path("{model}", "{revision}", "{benchmark}"),
        per_item=clean_items_path("{model}", "{revision}", "{benchmark}"),
    log:
        "logs/score_clean/{model}/{revision}/{benchmark}.log",
    benchmark:
        "benchmarks/score_clean/{model}/{revision}/{benchmark}.tsv"
    threads: 1
    resources:
        gpu=1,
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        model=model_spec,
        evaluation=evaluation_params,
    run:
        run_script("score.py", input, output, params, wildcards, threads, log)


rule matched_search:
    input:
        unpack(matched_search_inputs),
    output:
        matched_search_path("{model}", "{revision}", "{scope}", "{fraction}"),
    log:
        "logs/matched_search/{model}/{revision}/{scope}/p{fraction}.log",
    benchmark:
        "benchmarks/matched_search/{model}/{revision}/{scope}/p{fraction}.tsv"
    threads: 1
    resources:
        gpu=1,
        mem_mb=mem_mb,
        runtime=runtime,
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
        json=ablation_path("{model}", "{revision}", WILDCARD_CONDITION, "{benchmark}"),
        per_item=ablation_items_path(
            "{model}", "{revision}", WILDCARD_CONDITION, "{benchmark}"
        ),
    log:
        "logs/score_ablation/{model}/{revision}/{scope}/{selector}/p{fraction}/t{trial}/{benchmark}.log",
    benchmark:
        "benchmarks/score_ablation/{model}/{revision}/{scope}/{selector}/p{fraction}/t{trial}/{benchmark}.tsv"
    threads: 1
    resources:
        gpu=1,
        mem_mb=mem_mb,
        runtime=runtime,
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
        aggregate_path("{model}", "{revision}", "{benchmark}"),
    log:
        "logs/aggregate_scores/{model}/{revision}/{benchmark}.log",
    benchmark:
        "benchmarks/aggregate_scores/{model}/{revision}/{benchmark}.tsv"
    localrule: True
    run:
        run_script(
            "aggregate_scores.py", input, output, params, wildcards, threads, log
        )
