"""The docs say what the code does: every ``python -m``, ``make``, ``wneurons`` and ``snakemake`` command named in
README.md and docs/*.md (in backticks or in a fenced block) parses (``--help``, ``make -n``, the ``wneurons`` parser
and Snakemake's own argument parser) and the targets of its snakemake commands exist (a dry run per config); a job
count quoted beside a snakemake command (`` `snakemake -n ...`: 190 jobs``, ``snakemake ... # ... 4,994 jobs``) is what
that dry run counts; every config key named in them (``a.b.c`` in backticks, starting with a top-level key) exists in
the schema; and every ``results/...`` path named in them is a rule's output (wildcards and ``*`` allowed), a folder
of some, or a file in an output folder.

Each check is a function of a document's text (:func:`mentions`, :func:`command_problem`, :func:`dry_run_problems`,
:func:`count_problem`, :func:`key_problem`, :func:`path_problem`; :func:`drift` runs them all on one text), so the
last tests show each kind of drift caught on a planted document."""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import io
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

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
# Profiles the user writes (README: the site profile); the others must exist.
USER_PROFILES = {"profiles/site"}


def mentions(text: str, doc: str) -> list[tuple[str, int, str]]:
    """(doc, line, text) of every backticked span and every line of a fenced block of one document's text."""
    found = []
    fenced, held = False, ""  # held: a fenced line continued by a trailing backslash, joined as the shell does
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        if fenced and line.rstrip().endswith("\\"):
            held += line.strip().removeprefix("$ ")[:-1] + " "
        elif fenced:
            found.append((doc, number, held + line.strip().removeprefix("$ ")))
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


def _snakemake_targets(words: list[str]) -> tuple[str, list[str]]:
    """The config file (the Snakefile's default without one) and the targets of a snakemake command (options and
    their values left out)."""
    from snakemake.cli import get_argument_parser

    args = get_argument_parser().parse_args(words[1:])  # exits (SystemExit) on an unknown option
    targets = [t for t in args.targets if not re.search(r"[<>{}\[\]]", t)]
    for profile in set(args.profile or []) - USER_PROFILES:
        assert (ROOT / profile).is_dir(), f"no profile {profile}"
    return (str(args.configfile[0]) if args.configfile else DEFAULT_CONFIG), targets


def command_problem(words: list[str]) -> str | None:
    """Why a command of the docs does not parse as written, or None: ``python -m M`` (``--help``), ``make T``
    (``make -n``), ``wneurons`` (:func:`_wneurons_problem`) and ``snakemake`` (its argument parser, its profiles)."""
    if words[0] == "wneurons":
        return _wneurons_problem(words)
    if words[0] == "snakemake":
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                _snakemake_targets(words)
            except SystemExit:
                return err.getvalue().strip().splitlines()[-1]
            except AssertionError as failed:
                return str(failed)
        return None
    cmd = [sys.executable, "-m", words[2], "--help"] if words[0] == "python" else ["make", "-n", *words[1:2]]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    return None if proc.returncode == 0 else proc.stderr.strip()[-1500:]


def _show(doc: str, number: int, words: list[str], problem: str) -> str:
    return f"{doc}:{number}: {' '.join(words)}: {problem}"


@pytest.mark.parametrize("words", [_param(*c) for c in COMMANDS])
def test_every_command_parses(words):
    problem = command_problem(words)
    assert problem is None, f"{' '.join(words)}: {problem}"


# ---------------------------------------------------------------- snakemake targets and job counts: dry runs
WHOLE = ("all",)  # targets of a command that runs the whole DAG (none: the default target, `all`)


def _dry_run_key(words: list[str]) -> tuple[str, tuple[str, ...]]:
    config, targets = _snakemake_targets(words)
    return config, (WHOLE if set(targets) <= set(WHOLE) else tuple(sorted(targets)))


@functools.cache
def dry_run(config: str, targets: tuple[str, ...]) -> subprocess.CompletedProcess:
    """``snakemake -n --forceall TARGETS --configfile CONFIG --quiet rules``: every job of those targets' DAG,
    whatever is on disk."""
    # targets first: --configfile and --quiet take lists, so whatever follows them is theirs
    cmd = [sys.executable, "-m", "snakemake", "-n", "--forceall", *targets, "--configfile", config, "--quiet", "rules"]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def _missing_gguf(config: str) -> str | None:
    """The first ``gguf_file`` a config names that is not on disk yet (None: all there, or none named)."""
    models = yaml.safe_load((ROOT / config).read_text()).get("models", {})
    files = [spec["gguf_file"] for spec in models.values() if "gguf_file" in spec]
    return next((f for f in files if not (ROOT / f).exists()), None)


def dry_run_problems(found: list[tuple[str, int, list[str]]]) -> list[str]:
    """The targets of the snakemake commands among ``found`` that do not exist: one dry run per config for the
    commands that run its whole DAG (their job counts: :func:`count_problem`) and one for its other targets."""
    groups: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for doc, _, words in found:
        if words[0] == "snakemake" and not _expected(doc, " ".join(words)) and command_problem(words) is None:
            config, targets = _dry_run_key(words)
            groups.setdefault((config, WHOLE if targets == WHOLE else ()), []).extend(targets)
    problems = []
    for (config, _), targets in groups.items():
        proc = dry_run(config, tuple(sorted(set(targets))))
        missing = _missing_gguf(config)
        if missing:
            # A config of a model assembled by `make gemma3` (not part of `make install`): its dry run must stop at
            # exactly that, in one line naming the file.
            if proc.returncode == 0 or f"no such path: {missing}" not in proc.stderr:
                problems.append(f"{config}: not stopped at its missing GGUF {missing}: {proc.stderr[-1500:]}")
        elif proc.returncode != 0:
            problems.append(f"{config}: {sorted(set(targets))}: {proc.stderr[-1500:]}")
    return problems


def test_the_snakemake_targets_the_docs_name_exist():
    problems = dry_run_problems(COMMANDS)
    assert not problems, "\n".join(problems)


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
    config, targets = _dry_run_key(words)
    if _missing_gguf(config):
        pytest.skip(f"{config}: its GGUF {_missing_gguf(config)} is not here (make gemma3): no dry run to count")
    proc = dry_run(config, targets)
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
    text += _planted(f"snakemake -n --configfile config/demo.yaml all   # the demo: {right - 1} jobs")
    assert drift(text) == [
        f"planted.md:5: snakemake -n --configfile config/demo.yaml all: quotes {right - 1:,} jobs; its dry run has "
        f"{right:,}"
    ]
