rule fetch_data:
    output:
        directory(dataset_path("{dataset}")),
    log:
        "logs/fetch_data/{dataset}.log",
    benchmark:
        "benchmarks/fetch_data/{dataset}.tsv"
    localrule: True
    params:
        spec=dataset_spec,
    run:
        run_script("fetch_data.py", input, output, params, wildcards, threads, log)


rule convert_gguf_model:
    input:
        gguf_input,
    output:
        directory(converted_model_path("{model}")),
    log:
        "logs/convert_gguf_model/{model}.log",
    benchmark:
        "benchmarks/convert_gguf_model/{model}.tsv"
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        gguf=gguf_spec,
    run:
        run_script(
            "convert_gguf_model.py", input, output, params, wildcards, threads, log
        )
