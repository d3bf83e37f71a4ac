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
    conda:
        "../../environment.yml"
    threads: 1
    resources:
        gpu=1,
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        model=model_spec,
        evaluation=evaluation_params,
    script:
        "../scripts/score.py"


rule matched_search:
    input:
        unpack(matched_search_inputs),
    output:
        matched_search_path("{model}", "{revision}", "{scope}", "{fraction}"),
    log:
        "logs/matched_search/{model}/{revision}/{scope}/p{fraction}.log",
    benchmark:
        "benchmarks/matched_search/{model}/{revision}/{scope}/p{fraction}.tsv"
    conda:
        "../../environment.yml"
    threads: 1
    resources:
        gpu=1,
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        model=model_spec,
        evaluation=evaluation_params,
        search=search_spec,
    script:
        "../scripts/matched_search.py"


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
    conda:
        "../../environment.yml"
    threads: 1
    resources:
        gpu=1,
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        model=model_spec,
        evaluation=evaluation_params,
        condition=condition_spec,
    script:
        "../scripts/score.py"


rule aggregate_scores:
    input:
        condition_results,
    output:
        aggregate_path("{model}", "{revision}", "{benchmark}"),
    log:
        "logs/aggregate_scores/{model}/{revision}/{benchmark}.log",
    benchmark:
        "benchmarks/aggregate_scores/{model}/{revision}/{benchmark}.tsv"
    conda:
        "../../environment.yml"
    script:
        "../scripts/aggregate_scores.py"
