rule figure1:
    input:
        unpack(figure1_inputs),
    output:
        report(
            figure1_path(),
            caption="../report/figure1.rst",
            category="Neurons",
        ),
    log:
        "logs/figures/figure1.log",
    benchmark:
        "benchmarks/figures/figure1.tsv"
    localrule: True
    params:
        figure=figure1_params,
    run:
        run_script("figure1.py", input, output, params, wildcards, threads, log)


rule figure2a:
    input:
        figure2a_inputs,
    output:
        report(
            figure2a_path(),
            caption="../report/figure2a.rst",
            category="Neurons",
        ),
    log:
        "logs/figures/figure2a.log",
    benchmark:
        "benchmarks/figures/figure2a.tsv"
    localrule: True
    params:
        layer=config["figures"]["figure2a_layer"],
        models=list(MODELS),
    run:
        run_script("figure2a.py", input, output, params, wildcards, threads, log)


rule figure3:
    input:
        ppl=aggregate_path("{model}", "{revision}", "ppl"),
        blimp=aggregate_path("{model}", "{revision}", "blimp"),
        tse=aggregate_path("{model}", "{revision}", "tse"),
    output:
        report(
            figure3_path("{model}", "{revision}"),
            caption="../report/figure3.rst",
            category="Ablations",
        ),
    log:
        "logs/figures/figure3/{model}/{revision}.log",
    benchmark:
        "benchmarks/figures/figure3/{model}/{revision}.tsv"
    localrule: True
    run:
        run_script("figure3.py", input, output, params, wildcards, threads, log)


rule figure4:
    input:
        blimp=aggregate_path("{model}", "{revision}", "blimp"),
        tse=aggregate_path("{model}", "{revision}", "tse"),
    output:
        report(
            figure4_path("{model}", "{revision}"),
            caption="../report/figure4.rst",
            category="Ablations",
        ),
    log:
        "logs/figures/figure4/{model}/{revision}.log",
    benchmark:
        "benchmarks/figures/figure4/{model}/{revision}.tsv"
    localrule: True
    run:
        run_script("figure4.py", input, output, params, wildcards, threads, log)
