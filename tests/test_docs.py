"""The docs say what the code does: every ``python -m``, ``make``, ``wneurons`` and ``snakemake`` command named in
README.md and docs/*.md (in backticks or in a fenced block) parses (``--help``, ``make -n``, Snakemake's own
argument parser and a dry run of its targets), every config key named in them (``a.b.c`` in backticks,
starting with a top-level key) exists in the schema, and every ``results/...`` path named in them is a rule's output
(wildcards and ``*`` allowed), a folder of some, or a file in an output folder."""

from __future__ import annotations

import fnmatch
import functools
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
# Findings in sections other sessions own (README "Running the paper's grid" / "On a SLURM cluster", design.md,
# performance.md): expected to fail until they are fixed there. (doc, text the command or key starts with): reason.
EXPECTED: dict[tuple[str, str], str] = {
    ("docs/performance.md", "wneurons allocation"): "a log line of the allocation runner quoted as text, not a command",
}
# Profiles the user writes (README: the site profile); the others must exist.
USER_PROFILES = {"profiles/site"}


def _mentions() -> list[tuple[str, int, str]]:
    """(doc, line, text) of every backticked span and every line of a fenced block."""
    found = []
    for doc in DOCS:
        fenced, held = False, ""  # held: a fenced line continued by a trailing backslash, joined as the shell does
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            if line.strip().startswith("```"):
                fenced = not fenced
                continue
            name = str(doc.relative_to(ROOT))
            if fenced and line.rstrip().endswith("\\"):
                held += line.strip().removeprefix("$ ")[:-1] + " "
            elif fenced:
                found.append((name, number, held + line.strip().removeprefix("$ ")))
                held = ""
            else:
                found += [(name, number, span.strip()) for span in re.findall(r"`([^`]+)`", line)]
    return found


def _commands() -> list[tuple[str, int, list[str]]]:
    commands = []
    for doc, number, text in _mentions():
        if COMMAND.match(text):
            words = shlex.split(text.split("  #")[0].split(" # ")[0], posix=True)
            commands.append((doc, number, words))
    return commands


def _expected(doc: str, text: str):
    reason = next((r for (d, start), r in EXPECTED.items() if d == doc and text.startswith(start)), None)
    return pytest.mark.xfail(reason=reason, strict=True) if reason else ()


COMMANDS = _commands()


def _param(doc, number, words):
    return pytest.param(words, id=f"{doc}:{number}", marks=_expected(doc, " ".join(words)))


@pytest.mark.parametrize("words", [_param(*c) for c in COMMANDS if c[2][0] in ("python", "make", "wneurons")])
def test_every_python_make_and_wneurons_command_parses(words):
    if words[0] == "python":
        cmd = [sys.executable, "-m", words[2], "--help"]
    elif words[0] == "make":
        cmd = ["make", "-n", *words[1:2]]
    else:
        cmd = [sys.executable, "-m", "wneurons.cli", words[1], "--help"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(words)}: {proc.stderr[-1500:]}"


def _snakemake_targets(words: list[str]) -> tuple[str | None, list[str]]:
    """The config file and the targets of a snakemake command (options and their values left out)."""
    from snakemake.cli import get_argument_parser

    args = get_argument_parser().parse_args(words[1:])  # exits (SystemExit) on an unknown option
    targets = [t for t in args.targets if not re.search(r"[<>{}\[\]]", t)]
    for profile in set(args.profile or []) - USER_PROFILES:
        assert (ROOT / profile).is_dir(), f"no profile {profile}"
    return (args.configfile[0] if args.configfile else None), targets


@pytest.mark.parametrize("words", [_param(*c) for c in COMMANDS if c[2][0] == "snakemake"])
def test_every_snakemake_command_parses(words):
    _snakemake_targets(words)


def test_the_snakemake_targets_the_docs_name_exist():
    """One dry run per config file of every target the docs' snakemake commands name."""
    by_config: dict[str | None, set[str]] = {}
    for doc, _, words in COMMANDS:
        if words[0] == "snakemake" and not _expected(doc, " ".join(words)):
            config, targets = _snakemake_targets(words)
            by_config.setdefault(config, set()).update(targets)
    for config, targets in by_config.items():
        # targets first: --configfile and --quiet take lists, so whatever follows them is theirs
        cmd = [sys.executable, "-m", "snakemake", "-n", *sorted(targets)]
        cmd += [*(["--configfile", config] if config else []), "--quiet", "rules"]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
        missing = _missing_gguf(config)
        if missing:
            # A config of a model assembled by `make gemma3` (not part of `make install`): its dry run must stop at
            # exactly that, in one line naming the file.
            assert proc.returncode != 0 and f"no such path: {missing}" in proc.stderr, proc.stderr[-1500:]
            continue
        assert proc.returncode == 0, f"{config}: {sorted(targets)}: {proc.stderr[-1500:]}"


def _missing_gguf(config: str | None) -> str | None:
    """The first ``gguf_file`` a config names that is not on disk yet (None: all there, or none named)."""
    if config is None:
        return None
    models = yaml.safe_load((ROOT / config).read_text()).get("models", {})
    files = [spec["gguf_file"] for spec in models.values() if "gguf_file" in spec]
    return next((f for f in files if not (ROOT / f).exists()), None)


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
KEYS = sorted({(doc, n, text) for doc, n, text in _mentions() if KEY.match(text) and not FILE.search(text)})


def _flow_keys(text: str) -> list[str]:
    """The dotted keys of a backticked flow mapping (`pos: {model: m, percent: 1}` -> pos.model, pos.percent)."""
    head, _, body = text.partition(": ")
    try:
        mapping = yaml.safe_load("{" + body.strip()[1:-1].replace("|", "_") + "}")
    except yaml.YAMLError:
        return [head]
    return [f"{head}.{k}" for k in mapping] if isinstance(mapping, dict) else [head]


FLOW = re.compile(rf"^(?:{'|'.join(SCHEMA['properties'])})(?:\.[A-Za-z0-9_]+)*: \{{.*\}}$", re.DOTALL)
KEYS += sorted({(doc, n, key) for doc, n, text in _mentions() if FLOW.match(text) for key in _flow_keys(text)})


@pytest.mark.parametrize(
    "key", [pytest.param(text, id=f"{doc}:{number}", marks=_expected(doc, text)) for doc, number, text in KEYS]
)
def test_every_config_key_the_docs_name_is_in_the_schema(key):
    assert _schema_has(key.split(".")), f"{key} is not a key of workflow/schemas/config.schema.yaml"


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


RESULT_PATHS = sorted(
    {
        (str(doc.relative_to(ROOT)), number, path)
        for doc in DOCS
        for number, line in enumerate(doc.read_text().splitlines(), 1)
        for path in RESULT_PATH.findall(line)
    }
)


@pytest.mark.parametrize(
    "path", [pytest.param(p, id=f"{doc}:{n}", marks=_expected(doc, p)) for doc, n, p in RESULT_PATHS]
)
def test_every_results_path_the_docs_name_is_a_rule_output(path):
    wrong = [p for p in _expand(path) if not _is_output(p)]
    assert not wrong, f"{wrong} matches no rule's output (workflow/rules/*.smk, src/wneurons/experiment/paths.py)"
