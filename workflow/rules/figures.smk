# Every figure of the paper, in its order: one rule per figure (2b and 2d are drawn together). What a figure reads,
# how it is drawn, its caption and report section: its row in wneurons.jobs.figures.FIGURES; every rule runs
# workflow/scripts/figure.py; its inputs and its settings (the `figure` param) come from the same row.


rule figure1:
    input:
        unpack(figure_inputs("figure1")),
    output:
        figure_report(paths.figure("figure1"), "figure1"),
    log:
        paths.log_file("figures", "figure1"),
    benchmark:
        paths.benchmark_file("figures", "figure1")
    localrule: True
    params:
        figure=figure_params("figure1"),
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure2a:
    input:
        unpack(figure_inputs("figure2a")),
    output:
        figure_report(paths.figure("figure2a"), "figure2a"),
    log:
        paths.log_file("figures", "figure2a"),
    benchmark:
        paths.benchmark_file("figures", "figure2a")
    localrule: True
    params:
        figure=figure_params("figure2a"),
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure2bd:
    input:
        unpack(figure_inputs("figure2bd")),
    output:
        b=figure_report(paths.figure("figure2b"), "figure2bd", 0),
        d=figure_report(paths.figure("figure2d"), "figure2bd", 1),
    log:
        paths.log_file("figures", "figure2bd"),
    benchmark:
        paths.benchmark_file("figures", "figure2bd")
    localrule: True
    params:
        figure=figure_params("figure2bd"),
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure2c:
    input:
        unpack(figure_inputs("figure2c")),
    output:
        figure_report(paths.figure("figure2c"), "figure2c"),
    log:
        paths.log_file("figures", "figure2c"),
    benchmark:
        paths.benchmark_file("figures", "figure2c")
    localrule: True
    params:
        figure=figure_params("figure2c"),
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure3:
    input:
        unpack(figure_inputs("figure3")),
    output:
        figure_report(paths.figure("figure3", "{model}", "{revision}"), "figure3"),
    log:
        paths.log_file("figures", "figure3/{model}/{revision}"),
    benchmark:
        paths.benchmark_file("figures", "figure3/{model}/{revision}")
    localrule: True
    params:
        figure=figure_params("figure3"),
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule capability_figure:
    input:
        unpack(figure_inputs("capability_figure")),
    output:
        figure_report(
            paths.figure("capability", "{model}", "{revision}"), "capability_figure"
        ),
    log:
        paths.log_file("figures", "capability/{model}/{revision}"),
    benchmark:
        paths.benchmark_file("figures", "capability/{model}/{revision}")
    localrule: True
    params:
        figure=figure_params("capability_figure"),
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure3d:
    input:
        unpack(figure_inputs("figure3d")),
    output:
        figure_report(paths.figure("figure3d"), "figure3d"),
    log:
        paths.log_file("figures", "figure3d"),
    benchmark:
        paths.benchmark_file("figures", "figure3d")
    localrule: True
    params:
        figure=figure_params("figure3d"),
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure4:
    input:
        unpack(figure_inputs("figure4")),
    output:
        figure_report(paths.figure("figure4", "{model}", "{revision}"), "figure4"),
    log:
        paths.log_file("figures", "figure4/{model}/{revision}"),
    benchmark:
        paths.benchmark_file("figures", "figure4/{model}/{revision}")
    localrule: True
    params:
        figure=figure_params("figure4"),
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure5:
    input:
        unpack(figure_inputs("figure5")),
    output:
        figure_report(paths.figure("figure5"), "figure5"),
    log:
        paths.log_file("figures", "figure5"),
    benchmark:
        paths.benchmark_file("figures", "figure5")
    localrule: True
    params:
        figure=figure_params("figure5"),
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure6a:
    input:
        unpack(figure_inputs("figure6a")),
    output:
        figure_report(paths.figure("figure6a"), "figure6a"),
    log:
        paths.log_file("figures", "figure6a"),
    benchmark:
        paths.benchmark_file("figures", "figure6a")
    localrule: True
    params:
        figure=figure_params("figure6a"),
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure6b:
    input:
        unpack(figure_inputs("figure6b")),
    output:
        figure_report(paths.figure("figure6b", "{model}"), "figure6b"),
    log:
        paths.log_file("figures", "figure6b/{model}"),
    benchmark:
        paths.benchmark_file("figures", "figure6b/{model}")
    localrule: True
    params:
        figure=figure_params("figure6b"),
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure6cd:
    input:
        unpack(figure_inputs("figure6cd")),
    output:
        figure_report(paths.figure("figure6cd", "{model}"), "figure6cd"),
    log:
        paths.log_file("figures", "figure6cd/{model}"),
    benchmark:
        paths.benchmark_file("figures", "figure6cd/{model}")
    localrule: True
    params:
        figure=figure_params("figure6cd"),
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)


rule figure7:
    input:
        unpack(figure_inputs("figure7")),
    output:
        figure_report(paths.figure("figure7"), "figure7"),
    log:
        paths.log_file("figures", "figure7"),
    benchmark:
        paths.benchmark_file("figures", "figure7")
    localrule: True
    params:
        figure=figure_params("figure7"),
    run:
        run_script("figure.py", input, output, params, wildcards, threads, log, rule)
