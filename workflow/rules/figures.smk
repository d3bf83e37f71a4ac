# Every figure of the paper, in its order: one rule per figure (2b and 2d are drawn together). What a figure reads,
# how it is drawn, its caption and report section: its row in wneurons.jobs.figures.FIGURES; every rule runs
# workflow/scripts/figure.py. Inputs and params helpers are in common.smk.


rule figure1:
    input:
        unpack(figure1_inputs),
    output:
        figure_report(paths.figure1(), "figure1"),
    log:
        paths.log_file("figures", "figure1"),
    benchmark:
        paths.benchmark_file("figures", "figure1")
    localrule: True
    params:
        figure=figure1_params,
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure2a:
    input:
        figure2a_inputs,
    output:
        figure_report(paths.figure2a(), "figure2a"),
    log:
        paths.log_file("figures", "figure2a"),
    benchmark:
        paths.benchmark_file("figures", "figure2a")
    localrule: True
    params:
        layer=config["figures"]["figure2a_layer"],
        models=list(MODELS),
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure2bd:
    input:
        unpack(figure2bd_inputs),
    output:
        b=figure_report(paths.figure2b(), "figure2bd", 0),
        d=figure_report(paths.figure2d(), "figure2bd", 1),
    log:
        paths.log_file("figures", "figure2bd"),
    benchmark:
        paths.benchmark_file("figures", "figure2bd")
    localrule: True
    params:
        models=targets.training_models(config),
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure2c:
    input:
        figure2c_inputs,
    output:
        figure_report(paths.figure2c(), "figure2c"),
    log:
        paths.log_file("figures", "figure2c"),
    benchmark:
        paths.benchmark_file("figures", "figure2c")
    localrule: True
    params:
        models=targets.drift_models(config),
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure3:
    input:
        ppl=paths.aggregate("{model}", "{revision}", "ppl"),
        blimp=paths.aggregate("{model}", "{revision}", "blimp"),
        tse=paths.aggregate("{model}", "{revision}", "tse"),
    output:
        figure_report(paths.figure3("{model}", "{revision}"), "figure3"),
    log:
        paths.log_file("figures", "figure3/{model}/{revision}"),
    benchmark:
        paths.benchmark_file("figures", "figure3/{model}/{revision}")
    localrule: True
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure3d:
    input:
        figure3d_inputs,
    output:
        figure_report(paths.figure3d(), "figure3d"),
    log:
        paths.log_file("figures", "figure3d"),
    benchmark:
        paths.benchmark_file("figures", "figure3d")
    localrule: True
    params:
        figure=figure3d_params,
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure4:
    input:
        blimp=paths.aggregate("{model}", "{revision}", "blimp"),
        tse=paths.aggregate("{model}", "{revision}", "tse"),
    output:
        figure_report(paths.figure4("{model}", "{revision}"), "figure4"),
    log:
        paths.log_file("figures", "figure4/{model}/{revision}"),
    benchmark:
        paths.benchmark_file("figures", "figure4/{model}/{revision}")
    localrule: True
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure5:
    input:
        unpack(figure5_inputs),
    output:
        figure_report(paths.figure5(), "figure5"),
    log:
        paths.log_file("figures", "figure5"),
    benchmark:
        paths.benchmark_file("figures", "figure5")
    localrule: True
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure6a:
    input:
        figure6a_inputs,
    output:
        figure_report(paths.figure6a(), "figure6a"),
    log:
        paths.log_file("figures", "figure6a"),
    benchmark:
        paths.benchmark_file("figures", "figure6a")
    localrule: True
    params:
        figure=figure6a_params,
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure6b:
    input:
        paths.pair_signs_training("{model}"),
    output:
        figure_report(paths.figure6b("{model}"), "figure6b"),
    log:
        paths.log_file("figures", "figure6b/{model}"),
    benchmark:
        paths.benchmark_file("figures", "figure6b/{model}")
    localrule: True
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure6cd:
    input:
        unpack(figure6cd_inputs),
    output:
        figure_report(paths.figure6cd("{model}"), "figure6cd"),
    log:
        paths.log_file("figures", "figure6cd/{model}"),
    benchmark:
        paths.benchmark_file("figures", "figure6cd/{model}")
    localrule: True
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure7:
    input:
        unpack(figure7_inputs),
    output:
        figure_report(paths.figure7(), "figure7"),
    log:
        paths.log_file("figures", "figure7"),
    benchmark:
        paths.benchmark_file("figures", "figure7")
    localrule: True
    params:
        figure=figure7_params,
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)
