"""The ``wneurons`` command: one entry point over the workflow. Snakemake stays the engine: every subcommand that
runs the grid builds a ``snakemake`` command line (printed first), and every ``snakemake`` command keeps working.

    wneurons init MODEL [--grid paper|demo] [--name NAME] [-o my-model.yaml]   write a validated config
    wneurons plan [CONFIG] [--profile P] [--site S]     jobs, allocations, model loads, GPU-hours and disk
    wneurons list [CONFIG]                                what a config computes: models, conditions, benchmarks, jobs
    wneurons run [CONFIG] [-n] [--limit N] [--profile P] [-- SNAKEMAKE ARGS]   run (or dry-run) the grid
    wneurons status [CONFIG] [-d DIR]                     jobs done / running / left (Snakemake, SLURM ledgers)
    wneurons summary [CONFIG] [--limit N] [-d DIR]        the run's scores per condition (`run` prints it at the end)
    wneurons export-samples RESULTS_DIR OUT_DIR           per-item results as lm-eval --log_samples JSONL
    wneurons compare A B [--subset] [--rtol R]            two result trees (wneurons.report.compare)
    wneurons power PAIRED [--difference D] ...            sizing from a run's paired table (wneurons.report.power)
    wneurons explore [CONFIG] [--model M]                 build the neuron explorer and print where it is

Snakemake runs in the repository (the directory holding the Snakefile: the working directory when it holds one,
else the repository this package was installed from). Paths typed on the command line are read from the working
directory; the paths inside a config, as the workflow reads them, from the repository.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from wneurons.experiment import paths
from wneurons.experiment.config import ConfigError, load_yaml_strict, validate_config
from wneurons.experiment.model_facts import (
    ModelFacts,
    facts_from_config_json,
    facts_from_gguf,
    model_dir_facts,
)

SCHEMA = "workflow/schemas/config.schema.yaml"
# The grids `wneurons init` copies (every key but `models`): the paper's (full benchmarks, its trial counts), or the
# demo's toy sizes (a smoke test: such a run decides almost nothing).
GRIDS = {"paper": "config/config.yaml", "demo": "config/demo.yaml"}
DEFAULT_CONFIG = "config/config.yaml"
LOCAL_PROFILE = "profiles/local"  # `wneurons run` without --profile
# Template keys that name one of the template's models: reset for a config of another model (to their defaults).
_MODEL_KEYS: list[tuple[tuple[str, ...], Any]] = [
    (("figures", "figure1", "model"), None),
    (("figures", "figure1", "contrast"), None),
    (("figures", "figure5", "model"), None),
    (("figures", "figure6", "model"), None),
    (("figures", "figure7", "model"), None),
    (("pos", "model"), None),
    (("training", "pair_models"), []),
    (("report", "explorer", "models"), None),
    (("ablation", "single_layers", "models"), []),
]


class CommandError(Exception):
    """A problem the user can fix; its message is printed as one line."""


def repository_root() -> Path:
    """The workflow's directory: the working directory when it holds the Snakefile, else the repository this package
    was installed from (an editable install)."""
    for candidate in (Path.cwd(), Path(__file__).resolve().parents[3]):
        if (candidate / "Snakefile").is_file():
            return candidate
    raise CommandError("no Snakefile here: run wneurons in the repository (the directory holding the Snakefile)")


def user_path(path: str, root: Path) -> str:
    """A path the user typed, as the workflow (run in ``root``) must read it: unchanged in ``root`` or when absolute;
    elsewhere (review N17) resolved against the working directory, or against ``root`` where only ``root`` has it
    (the defaults, `config/config.yaml`, name the repository's files)."""
    here = Path.cwd()
    if Path(path).is_absolute() or here.resolve() == root.resolve():
        return path
    return str(root / path if (root / path).exists() and not (here / path).exists() else (here / path).resolve())


# ---------------------------------------------------------------- init
def _model_name(model: str) -> str:
    stem = Path(model.rstrip("/")).name.removesuffix(".gguf").lower()
    name = re.sub(r"[^a-z0-9._-]+", "-", stem).strip("-._")
    return name or "model"


def estimated_params(config_json: str | os.PathLike) -> int:
    """Parameters of a decoder-only transformer from its config.json alone (no weights): embeddings (untied
    ones twice), attention 4 d^2 per layer and the MLP (3 d d_ff when gated, else 2 d d_ff)."""
    import json

    config = json.loads(Path(config_json).read_text())
    text = config.get("text_config") or config
    d = next(text[k] for k in ("hidden_size", "n_embd", "d_model") if k in text)
    facts = facts_from_config_json(config_json)
    d_ff = facts.d_ff or 4 * d
    gated = any(k in text for k in ("hidden_act", "hidden_activation")) and config.get("model_type") != "gpt_neox"
    embeddings = text.get("vocab_size", 0) * d * (1 if text.get("tie_word_embeddings", True) else 2)
    return embeddings + (facts.num_layers or 0) * (4 * d * d + (3 if gated else 2) * d * d_ff)


def model_entry(model: str, revision: str | None = None) -> tuple[dict, ModelFacts]:
    """The ``models`` entry of MODEL (a local model directory, a GGUF file or a hub id) and the facts it was built
    from: family, layers and width from the model's own config.json (fetched from the hub for a hub id) or GGUF
    header, parameters from its weight headers where they are on disk."""
    path = Path(model)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise CommandError(f"init: {model}: a directory without config.json is not a saved transformers model")
        facts, source = model_dir_facts(path), {"local_path": str(path)}
        if facts.params is None:
            facts = facts._replace(params=estimated_params(path / "config.json"))
    elif path.is_file():
        try:
            facts = facts_from_gguf(path)
        except ValueError as err:
            raise CommandError(f"init: {model}: {err} (give a model directory, a GGUF file or a hub id)") from None
        source = {"gguf_file": str(path)}
    elif re.fullmatch(r"[^/\s]+/[^/\s]+", model):
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import HfHubHTTPError

        try:
            config_json = hf_hub_download(model, "config.json", revision=revision)
        except (HfHubHTTPError, OSError, ValueError) as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise CommandError(f"init: {model}: cannot fetch config.json from the hub: {first}") from None
        facts = facts_from_config_json(config_json)._replace(params=estimated_params(config_json), where=model)
        source = {"hub_id": model}
    else:
        raise CommandError(f"init: {model}: no such directory or file, and not a hub id (org/name)")
    entry = {"family": None, **source, "num_layers": facts.num_layers}
    if revision and "hub_id" in source:
        entry["final_revision"] = revision
    if facts.d_ff:
        entry["d_ff"] = int(facts.d_ff)
    entry["params_b"] = float(f"{facts.params / 1e9:.3g}") if facts.params else 0.001
    return entry, facts


def _family(facts: ModelFacts, family: str | None, families: list[str]) -> str:
    types = [t for t in facts.model_types if t]
    if not any(t in families for t in types):
        raise CommandError(
            f"init: {facts.where}: model_type {types[0] if types else None!r} is not a supported family "
            f"(supported: {', '.join(families)})"
        )
    if family is not None:
        if not any(family.removesuffix("_text") == t.removesuffix("_text") for t in types):
            raise CommandError(
                f"init: --family {family!r} but the model's model_type is {' or '.join(map(repr, types))} "
                f"({facts.where})"
            )
        return family
    return next(t for t in types if t in families)


def _reset(config: dict, path: tuple[str, ...], value: Any) -> None:
    node = config
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            return
        node = node[key]
    if path[-1] in node:
        node[path[-1]] = value


def _fit_layer_groups(config: dict, num_layers: int) -> str | None:
    """Halve the template's layer-group size until the model has at least two groups (a group as large as the model
    would repeat the all-layer ablation); what was changed, or None."""
    groups = config.get("ablation", {}).get("layer_groups", {})
    size = groups.get("size")
    if not isinstance(size, int) or size < num_layers:
        return None
    groups["size"] = max(1, (num_layers + 1) // 2)
    return f"ablation.layer_groups.size {size} -> {groups['size']} ({num_layers} layers)"


def _grid_summary(config: dict) -> str:
    """The sizes a config's grid runs at, in one line, read from the config itself."""
    evaluation, ablation = config.get("evaluation", {}), config.get("ablation", {})

    def size(value: Any, unit: str) -> str:
        return f"all {unit}" if value is None else f"{value} {unit}"

    tasks = evaluation.get("capability", {}).get("tasks") or []
    return (
        f"BLiMP {size(evaluation.get('blimp_pairs_per_paradigm'), 'pairs per paradigm')}, "
        f"TSE {size(evaluation.get('tse_items_per_subtask'), 'items per subtask')}, "
        f"perplexity {size(evaluation.get('perplexity_max_tokens'), 'tokens')}, "
        f"{ablation.get('random_trials')} random trials at each of "
        f"{', '.join(format(p, 'g') for p in ablation.get('percents', []))}% of each layer, "
        f"capability: {', '.join(tasks) or 'none'}"
    )


def init_config(args: argparse.Namespace, root: Path) -> tuple[Path, str]:
    """Write the config of ``args.model`` (keys other than ``models`` from ``args.template``, else the grid
    ``args.grid`` of :data:`GRIDS`), validated as the workflow validates it; return its path and a line saying
    which grid it got at which sizes."""
    template_path = Path(user_path(args.template, root) if args.template else root / GRIDS[args.grid])
    template = load_yaml_strict(template_path)
    schema = load_yaml_strict(root / SCHEMA)
    families = [f for f in schema["properties"]["models"]["additionalProperties"]["properties"]["family"]["enum"] if f]
    entry, facts = model_entry(args.model, args.revision)
    entry["family"] = _family(facts, args.family, families)
    # The config's relative paths are read from where its template's are: the repository for a grid's (review N17:
    # not the working directory, which may be anywhere), the working directory for a --template typed here.
    workdir = Path.cwd() if args.template else root
    for key in ("local_path", "gguf_file"):  # the model typed here, as the workflow in ``workdir`` reads it
        if key in entry and workdir.resolve() != Path.cwd().resolve():
            entry[key] = str(Path(entry[key]).resolve())
    name = args.name or _model_name(args.model)
    config = {key: value for key, value in template.items() if key != "models"}
    for path, value in _MODEL_KEYS:
        _reset(config, path, value)
    fitted = _fit_layer_groups(config, entry["num_layers"])
    config = {"models": {name: entry}, **config, "results_dir": f"results-{name}"}  # its own, beside the demo's
    out = Path(user_path(args.output or f"config/{name}.yaml", root))
    try:
        validate_config(yaml.safe_load(yaml.safe_dump(config)), root / SCHEMA, workdir)
    except ConfigError as err:
        raise CommandError(f"init: the config for {name} does not validate: {err}") from None
    grid = f"the grid of {template_path}" if args.template else f"the {args.grid} grid ({GRIDS[args.grid]})"
    chose = f"{grid}: {_grid_summary(config)}" + (f"; {fitted}" if fitted else "")
    out.parent.mkdir(parents=True, exist_ok=True)
    header = (
        f"# Written by `wneurons init {args.model}`: {name} ({entry['family']}, {entry['num_layers']} layers, "
        f"read from {facts.where}); every key but `models` from {template_path}.\n"
        f"# Grid: {chose}.\n"
        f"# Keys and defaults: {SCHEMA}. Check it with `snakemake -n --configfile {out}`.\n"
    )
    out.write_text(header + yaml.safe_dump(config, sort_keys=False))
    return out, chose


# ---------------------------------------------------------------- run, plan, explore
def checked_config(config: str) -> str:
    """``config`` when it parses (duplicate keys refused); CommandError naming file, line and column else
    (Snakemake's own message names neither)."""
    if not Path(config).is_file():
        raise CommandError(f"{config}: no such config file")
    try:
        load_yaml_strict(config)
    except ConfigError as err:
        raise CommandError(str(err)) from None
    return config


def snakemake_command(config: str, profiles: list[str], extra: list[str], overrides: list[str] = ()) -> list[str]:
    """The ``snakemake`` command line a subcommand runs; ``overrides``: config files merged over ``config``."""
    cmd = [sys.executable, "-m", "snakemake", "--configfile", config, *overrides]
    cmd += [arg for p in profiles for arg in ("--profile", p)]
    return cmd + extra


def _run_snakemake(cmd: list[str], root: Path) -> int:
    print("$ " + " ".join(["snakemake", *cmd[3:]]), file=sys.stderr, flush=True)
    return subprocess.run(cmd, cwd=root).returncode


def validated(config: str, root: Path, workdir: Path | None = None) -> dict:
    """The config at ``config`` validated as the workflow validates it (defaults filled in; its relative paths read
    from ``workdir``, default ``root``)."""
    return validate_config(load_yaml_strict(checked_config(config)), root / SCHEMA, workdir or root)


def _snakemake_failure(err: subprocess.CalledProcessError) -> CommandError:
    lines = [line for line in (err.stderr or "").splitlines() if line.strip()]
    return CommandError(lines[-1] if lines else f"snakemake failed ({err.returncode})")


def status(args: argparse.Namespace, root: Path) -> list[str]:
    """``wneurons status``: the lines of :func:`wneurons.cli.progress.status_lines` for the config's run."""
    from wneurons.cli import progress as run_status

    workdir = run_status.working_directory(root, args.directory)
    config = str(Path(checked_config(args.config)).resolve())
    cmd = [sys.executable, "-m", "snakemake", "-s", str(root / "Snakefile"), "-d", str(workdir), "--configfile", config]
    try:
        total = run_status.dry_run(cmd, root, force_all=True)
        left = run_status.dry_run(cmd, root, force_all=False)
    except subprocess.CalledProcessError as err:
        raise _snakemake_failure(err) from None
    return run_status.status_lines(total, left, workdir, paths.Roots.of(load_yaml_strict(config)))


def run_summary(args: argparse.Namespace, root: Path) -> list[str]:
    """The lines of :func:`wneurons.cli.summary.summary_lines` for the config's run (its ``--limit N`` quick run's
    results dir with ``args.limit``), read under ``args.directory`` (default ``root``)."""
    from wneurons.cli.listing import limit_overrides
    from wneurons.cli.summary import summary_lines

    workdir = Path(getattr(args, "directory", None) or root).resolve()
    config = validated(args.config, root, workdir)
    if args.limit is not None:
        try:
            config["results_dir"] = limit_overrides(config, args.limit)[0]["results_dir"]
        except ValueError as err:
            raise CommandError(f"{args.command}: {err}") from None
    return summary_lines(config, workdir)


# ---------------------------------------------------------------- the parser
class DefaultsWhereUseful(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults appended to an option's help only where they say something: not None, and not where the help
    already names its default (review N18: "(default: config/NAME.yaml) (default: None)")."""

    def _get_help_string(self, action):
        if action.default is None or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    from wneurons.experiment import plan

    fmt = DefaultsWhereUseful
    parser = argparse.ArgumentParser(
        prog="wneurons",
        description="Wasserstein neurons: configure, size and run the workflow (Snakemake underneath), and read "
        "its results. `wneurons COMMAND --help` explains each command's options.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "init",
        formatter_class=fmt,
        help="write a validated config for one model",
        description="Write a config for MODEL, checked before any job: its family (transformers model_type) and "
        "layer count are read from the model's own config.json (a local directory; fetched from the hub for a "
        "hub id) or GGUF header, and the config is validated as the workflow validates it. Every key but "
        "`models` comes from the grid (--grid) or --template; it says which, at which sizes.",
    )
    p.add_argument("model", metavar="MODEL", help="a saved transformers model directory, a GGUF file or a hub id")
    p.add_argument("--name", help="the model's name in result paths (default: from MODEL, lower case)")
    p.add_argument("--family", help="the family you expect; an error in one line if the model is of another")
    p.add_argument("--revision", help="hub revision (branch, tag or commit) of a hub id; default: main")
    p.add_argument(
        "--grid",
        choices=sorted(GRIDS),
        default="paper",
        help="the grid copied: paper (config/config.yaml: full benchmarks, the paper's trial counts and percents) or "
        "demo (config/demo.yaml: toy sizes that run in minutes and decide almost nothing)",
    )
    p.add_argument("--template", help="a config whose other keys (data, grid) are copied, instead of --grid's")
    p.add_argument("-o", "--output", help="where to write it (default: config/NAME.yaml)")

    p = sub.add_parser(
        "plan",
        formatter_class=fmt,
        help="jobs, allocations, model loads, GPU-hours and disk of a config's grid",
        description="Size a config's grid before running it, from a dry run of the real DAG through the profiles "
        "(perf/grid_jobs.py) and the activation-shard disk (perf/disk_grid.py). GPU-hours are forward FLOPs at "
        "the rates the allocations are sized with (or --tflops) plus startup and weight loading: stated "
        "assumptions, not measurements.",
    )
    p.add_argument("config", nargs="?", default=DEFAULT_CONFIG, help="the config to size")
    plan.add_grid_arguments(p)
    p.add_argument("--no-disk", action="store_true", help="leave out the activation-shard disk table")

    p = sub.add_parser(
        "list",
        formatter_class=fmt,
        help="what a config computes: models, revisions, conditions, benchmarks and sizes, scoring jobs",
        description="List what a config's grid computes, from the package's grid functions (no Snakemake run): "
        "models x revisions, the ablation conditions of each checkpoint (scopes, selectors, percents, trials), the "
        "benchmarks with the items drawn (counted on the data where it is here) and the number of scoring jobs.",
    )
    p.add_argument("config", nargs="?", default=DEFAULT_CONFIG, help="the config to list")
    p.add_argument("-d", "--directory", help="the run's working directory (its data); default the repository")

    p = sub.add_parser(
        "status",
        formatter_class=fmt,
        help="jobs done / running / left of a config's run",
        description="How far a config's run is: jobs done and left per rule (two Snakemake dry runs: every job "
        "of the DAG, and those still to run), outputs being written (Snakemake's locks and incomplete markers) "
        "and, under SLURM, the finished members of the newest run's allocations (their ledgers).",
    )
    p.add_argument("config", nargs="?", default=DEFAULT_CONFIG, help="the config of the run")
    p.add_argument("-d", "--directory", help="the run's working directory (snakemake -d); default the repository")

    p = sub.add_parser(
        "summary",
        formatter_class=fmt,
        help="a run's scores per model, revision and condition (what `wneurons run` prints when it succeeds)",
        description="Print a table of what a config's run has scored so far: per model and revision, the clean "
        "model and every ablation condition of the grid, each benchmark's score (accuracy in %%, perplexity) with "
        "its n, read from the per-condition result JSONs that exist (random trials: mean and SEM over them, as the "
        "aggregate job pools them).",
    )
    p.add_argument("config", nargs="?", default=DEFAULT_CONFIG, help="the config of the run")
    p.add_argument("--limit", type=int, metavar="N", help="the quick run of `wneurons run --limit N`")
    p.add_argument("-d", "--directory", help="the run's working directory; default the repository")

    p = sub.add_parser(
        "export-samples",
        formatter_class=fmt,
        help="write a run's per-item BLiMP / TSE results as lm-eval --log_samples JSONL",
        description="Write every blimp/tse.items.parquet under RESULTS_DIR (clean and ablated) in "
        "lm-evaluation-harness's --log_samples shape: OUT_DIR/<same folders>/samples_<task>.jsonl with doc_id, "
        "doc, target, arguments, resps / filtered_resps (the run's log-likelihoods), doc_hash, prompt_hash, "
        "target_hash, acc (wneurons.report.samples). The sentences are drawn again from the verified data under "
        "--directory with the run's recorded settings.",
    )
    p.add_argument("results_dir", metavar="RESULTS_DIR", help="a run's results_dir (or any folder under it)")
    p.add_argument("out_dir", metavar="OUT_DIR", help="where the JSONL files go")
    p.add_argument("-d", "--directory", default=".", help="the run's working directory (its resources/data)")

    p = sub.add_parser(
        "run",
        formatter_class=fmt,
        help="run (or dry-run) the grid with Snakemake",
        description="Run `snakemake --configfile CONFIG [--profile P] ...` in the repository after checking that "
        "the config parses (a YAML error is named by file and line). Arguments after `--` go to Snakemake "
        "unchanged (targets, --cores, --keep-going ...), e.g. `wneurons run config/demo.yaml -- --cores 2`.",
    )
    p.add_argument("config", nargs="?", default=DEFAULT_CONFIG, help="the config of the run")
    p.add_argument("-n", "--dry-run", action="store_true", help="only list the jobs that would run")
    p.add_argument(
        "--limit",
        type=int,
        metavar="N",
        help="a quick run: at most N items per BLiMP paradigm, TSE subtask and capability task and N perplexity "
        "windows, into {results_dir}-limitN/ (never mixed with a full run); it says what it capped",
    )
    p.add_argument(
        "--profile",
        action="append",
        default=[],
        help=f"a Snakemake profile (repeatable), e.g. profiles/slurm; default {LOCAL_PROFILE} (all cores here)",
    )

    p = sub.add_parser(
        "explore",
        formatter_class=fmt,
        help="build a model's neuron explorer and print where it is",
        description="Build the static, offline neuron explorer of a model's final revision (Snakemake target "
        "{results_dir}/{model}/{revision}/explorer) and print the path of its index.html.",
    )
    p.add_argument("config", nargs="?", default=DEFAULT_CONFIG, help="the config of the run")
    p.add_argument("--model", help="the model (default: the config's first)")
    p.add_argument("--profile", action="append", default=[], help="a Snakemake profile (repeatable)")
    p.add_argument("--cores", default="all", help="Snakemake --cores")

    for name, module, text in (
        ("compare", "wneurons.report.compare", "compare two result trees (exit 1 on result differences)"),
        ("power", "wneurons.report.power", "size the next run from a run's paired table"),
    ):
        p = sub.add_parser(
            name,
            help=text,
            add_help=False,
            description=f"{text}; the options are {module}'s (`wneurons {name} --help`).",
        )
        p.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def split_passthrough(argv: list[str]) -> tuple[list[str], list[str]]:
    """``argv`` of ``wneurons`` and the arguments after ``--`` that ``run`` and ``explore`` pass to Snakemake."""
    if argv[:1] in (["run"], ["explore"]) and "--" in argv:  # the rest is Snakemake's
        return argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    return argv, []


def main(argv: list[str] | None = None) -> int:
    argv, passthrough = split_passthrough(list(sys.argv[1:] if argv is None else argv))
    if argv[:1] == ["compare"]:  # its own options and --help, unchanged
        from wneurons.report import compare

        return compare.main(argv[1:], prog="wneurons compare")
    if argv[:1] == ["power"]:
        from wneurons.report import power

        return power.main(argv[1:], prog="wneurons power")
    args = build_parser().parse_args(argv)
    try:
        root = repository_root()
        if getattr(args, "config", None):
            args.config = user_path(args.config, root)
        if args.command == "init":
            out, chose = init_config(args, root)
            print(f"wrote {out} with {chose}")
            print(f"next: wneurons plan {out}  (or: snakemake -n --configfile {out})")
            return 0
        if args.command == "plan":
            from wneurons.experiment import plan

            checked_config(args.config)
            args.profile = args.profile or ["profiles/slurm"]
            try:
                plan.print_grid(args, root)
            except plan.PlanError as err:  # one line: the config's key, the site's limit or Snakemake's error
                raise CommandError(str(err)) from None
            except subprocess.CalledProcessError as err:
                raise _snakemake_failure(err) from None
            if not args.no_disk:
                print()
                plan.print_disk(Path(root) / args.config, root)
            return 0
        if args.command == "run":
            extra = (["-n"] if args.dry_run else []) + passthrough
            # Without a profile, this machine's cores in threads of one process (profiles/local), as `make demo`:
            # Snakemake itself would stop at once asking for --cores.
            profiles = args.profile or [LOCAL_PROFILE]
            overrides = []
            if args.limit is not None:
                from wneurons.cli.listing import write_limit_file

                if args.limit < 1:
                    raise CommandError(f"run: --limit must be a positive number of items, got {args.limit}")
                path, line = write_limit_file(validated(args.config, root), args.limit, root)
                print(line, file=sys.stderr)
                overrides = [str(path)]
            code = _run_snakemake(snakemake_command(checked_config(args.config), profiles, extra, overrides), root)
            dry = args.dry_run or bool({"-n", "--dry-run", "--dryrun"} & set(passthrough))
            if code == 0 and not dry:  # as lm-eval ends: what the run scored
                print("\n".join(run_summary(args, root)))
            return code
        if args.command == "list":
            from wneurons.cli.listing import describe

            workdir = Path(args.directory).resolve() if args.directory else root
            print(f"{args.config}: " + "\n".join(describe(validated(args.config, root, workdir), workdir)))
            return 0
        if args.command == "status":
            print("\n".join(status(args, root)))
            return 0
        if args.command == "summary":
            print("\n".join(run_summary(args, root)))
            return 0
        if args.command == "export-samples":
            from wneurons.report.samples import export_samples

            if not Path(args.results_dir).is_dir():
                raise CommandError(f"export-samples: {args.results_dir}: no such directory")
            try:
                written = export_samples(args.results_dir, args.out_dir, args.directory)
            except ValueError as err:
                raise CommandError(f"export-samples: {err}") from None
            print(f"wrote {len(written)} lm-eval sample files under {args.out_dir}")
            return 0
        if args.command == "explore":
            config = validate_config(load_yaml_strict(checked_config(args.config)), root / SCHEMA, root)
            model = args.model or next(iter(config["models"]))
            if model not in config["models"]:
                raise CommandError(f"explore: {model!r} is not a model of {args.config}")
            with paths.roots_of(config):  # under the config's results_dir
                site = paths.explorer(model, config["models"][model]["final_revision"])
            cmd = snakemake_command(args.config, args.profile, ["--cores", str(args.cores), *passthrough, site])
            code = _run_snakemake(cmd, root)
            if code == 0:
                print(f"{root / site / 'index.html'}")
            return code
    except (CommandError, ConfigError) as err:
        print(str(err), file=sys.stderr)
        return 2
    return 1
