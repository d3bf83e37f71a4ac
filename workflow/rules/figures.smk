# Every figure of the paper, in its order: one rule per figure (2b and 2d are drawn together); what a figure reads
# and how it is drawn: its script in workflow/scripts/ and the inputs/params helpers in common.smk.


rule figure1:
    input:
        unpack(figure1_inputs),
    output:
        report(
            paths.figure1(),
            caption="../report/figure1.rst",
            category="Neurons",
        ),
    log:
        paths.log_file("figures", "figure1"),
    benchmark:
        paths.benchmark_file("figures", "figure1")
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
            paths.figure2a(),
            caption="../report/figure2a.rst",
            category="Neurons",
        ),
    log:
        paths.log_file("figures", "figure2a"),
    benchmark:
        paths.benchmark_file("figures", "figure2a")
    localrule: True
    params:
        layer=config["figures"]["figure2a_layer"],
        models=list(MODELS),
    run:
        run_script("figure2a.py", input, output, params, wildcards, threads, log)


rule figure2bd:
    input:
        unpack(figure2bd_inputs),
    output:
        b=report(
            paths.figure2b(), caption="../report/figure2b.rst", category="Training"
        ),
        d=report(
            paths.figure2d(), caption="../report/figure2d.rst", category="Training"
        ),
    log:
        paths.log_file("figures", "figure2bd"),
    benchmark:
        paths.benchmark_file("figures", "figure2bd")
    localrule: True
    params:
        models=targets.training_models(config),
    run:
        run_script("figure2bd.py", input, output, params, wildcards, threads, log)


rule figure2c:
    input:
        figure2c_inputs,
    output:
        report(paths.figure2c(), caption="../report/figure2c.rst", category="Training"),
    log:
        paths.log_file("figures", "figure2c"),
    benchmark:
        paths.benchmark_file("figures", "figure2c")
    localrule: True
    params:
        models=targets.drift_models(config),
    run:
        run_script("figure2c.py", input, output, params, wildcards, threads, log)


rule figure3:
    input:
        ppl=paths.aggregate("{model}", "{revision}", "ppl"),
        blimp=paths.aggregate("{model}", "{revision}", "blimp"),
        tse=paths.aggregate("{model}", "{revision}", "tse"),
    output:
        report(
            paths.figure3("{model}", "{revision}"),
            caption="../report/figure3.rst",
            category="Ablations",
        ),
    log:
        paths.log_file("figures", "figure3/{model}/{revision}"),
    benchmark:
        paths.benchmark_file("figures", "figure3/{model}/{revision}")
    localrule: True
    run:
        run_script("figure3.py", input, output, params, wildcards, threads, log)


rule capability_figure:
    input:
        blimp=paths.aggregate("{model}", "{revision}", "blimp"),
        tse=paths.aggregate("{model}", "{revision}", "tse"),
        capability=paths.aggregate("{model}", "{revision}", "capability"),
    output:
        report(
            paths.capability_figure("{model}", "{revision}"),
            caption="../report/capability_figure.rst",
            category="Ablations",
        ),
    log:
        paths.log_file("figures", "capability/{model}/{revision}"),
    benchmark:
        paths.benchmark_file("figures", "capability/{model}/{revision}")
    localrule: True
    run:
        run_script(
            "capability_figure.py", input, output, params, wildcards, threads, log
        )


rule figure3d:
    input:
        figure3d_inputs,
    output:
        report(
            paths.figure3d(),
            caption="../report/figure3d.rst",
            category="Mechanism",
        ),
    log:
        paths.log_file("figures", "figure3d"),
    benchmark:
        paths.benchmark_file("figures", "figure3d")
    localrule: True
    params:
        figure=figure3d_params,
    run:
        run_script("figure3d.py", input, output, params, wildcards, threads, log)


rule figure4:
    input:
        blimp=paths.aggregate("{model}", "{revision}", "blimp"),
        tse=paths.aggregate("{model}", "{revision}", "tse"),
    output:
        report(
            paths.figure4("{model}", "{revision}"),
            caption="../report/figure4.rst",
            category="Ablations",
        ),
    log:
        paths.log_file("figures", "figure4/{model}/{revision}"),
    benchmark:
        paths.benchmark_file("figures", "figure4/{model}/{revision}")
    localrule: True
    run:
        run_script("figure4.py", input, output, params, wildcards, threads, log)


rule figure5:
    input:
        unpack(figure5_inputs),
    output:
        report(
            paths.figure5(),
            caption="../report/figure5.rst",
            category="Mechanism",
        ),
    log:
        paths.log_file("figures", "figure5"),
    benchmark:
        paths.benchmark_file("figures", "figure5")
    localrule: True
    run:
        run_script("figure5.py", input, output, params, wildcards, threads, log)


rule figure6a:
    input:
        figure6a_inputs,
    output:
        report(
            paths.figure6a(),
            caption="../report/figure6a.rst",
            category="Mechanism",
        ),
    log:
        paths.log_file("figures", "figure6a"),
    benchmark:
        paths.benchmark_file("figures", "figure6a")
    localrule: True
    params:
        figure=figure6a_params,
    run:
        run_script("figure6a.py", input, output, params, wildcards, threads, log)


rule figure6b:
    input:
        paths.pair_signs_training("{model}"),
    output:
        report(
            paths.figure6b("{model}"),
            caption="../report/figure6b.rst",
            category="Training",
        ),
    log:
        paths.log_file("figures", "figure6b/{model}"),
    benchmark:
        paths.benchmark_file("figures", "figure6b/{model}")
    localrule: True
    run:
        run_script("figure6b.py", input, output, params, wildcards, threads, log)


rule figure6cd:
    input:
        unpack(figure6cd_inputs),
    output:
        report(
            paths.figure6cd("{model}"),
            caption="../report/figure6cd.rst",
            category="Training",
        ),
    log:
        paths.log_file("figures", "figure6cd/{model}"),
    benchmark:
        paths.benchmark_file("figures", "figure6cd/{model}")
    localrule: True
    run:
        run_script("figure6cd.py", input, output, params, wildcards, threads, log)


rule figure7:
    input:
        unpack(figure7_inputs),
    output:
        report(
            paths.figure7(),
            caption="../report/figure7.rst",
            category="Mechanism",
        ),
    log:
        paths.log_file("figures", "figure7"),
    benchmark:
        paths.benchmark_file("figures", "figure7")
    localrule: True
    params:
        figure=figure7_params,
    run:
        run_script("figure7.py", input, output, params, wildcards, threads, log)
