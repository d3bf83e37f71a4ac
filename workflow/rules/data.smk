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
