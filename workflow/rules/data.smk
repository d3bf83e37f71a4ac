rule fetch_data:
    output:
        directory(dataset_path("{dataset}")),
    log:
        "logs/fetch_data/{dataset}.log",
    benchmark:
        "benchmarks/fetch_data/{dataset}.tsv"
    conda:
        "../../environment.yml"
    params:
        spec=dataset_spec,
    script:
        "../scripts/fetch_data.py"


rule convert_gguf_model:
    input:
        gguf_input,
    output:
        directory(converted_model_path("{model}")),
    log:
        "logs/convert_gguf_model/{model}.log",
    benchmark:
        "benchmarks/convert_gguf_model/{model}.tsv"
    conda:
        "../../environment.yml"
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        gguf=gguf_spec,
    script:
        "../scripts/convert_gguf_model.py"
