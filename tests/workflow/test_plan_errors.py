"""``wneurons plan`` shows why a grid cannot be planned in one line: the workflow's own refusal (a config key, the
site's limits), a missing profile, or Snakemake's error, which Snakemake 9 logs to stdout while stderr holds only
"Using profile …" (the line ``plan`` showed before)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from tiny_project import REPO

from wneurons.experiment.plan import failure_line

PREAMBLE = "Using profile profiles/slurm for setting default command line arguments.\n"
SITE_NOTE = "site_limits: read partition ci: MaxTime 15 min, 19,284 MB per node, 2 GPU(s) per node\n"
# Snakemake 9.27's stdout for a target no rule makes, and for an exception raised while its Snakefile is parsed.
MISSING_RULE = (
    "Building DAG of jobs...\nMissingRuleException:\nNo rule to produce nosuchtarget (if you use input functions "
    "make sure that they don't raise unexpected exceptions).\n"
)
PARSE_ERROR = 'KeyError in file "/x/Snakefile", line 2:\n\'results_dir\'\n  File "/x/Snakefile", line 2, in <module>\n'


@pytest.mark.parametrize(
    ("stdout", "stderr", "expected"),
    [
        ("", PREAMBLE + SITE_NOTE + "site: max_mem_mb 1,500 MB is below\n", "site: max_mem_mb 1,500 MB is below"),
        (MISSING_RULE, PREAMBLE + SITE_NOTE, "MissingRuleException: No rule to produce nosuchtarget (if you use"),
        (PARSE_ERROR, PREAMBLE, "KeyError in file \"/x/Snakefile\", line 2: 'results_dir'"),
        ("Building DAG of jobs...\n", PREAMBLE, "snakemake failed (1): Building DAG of jobs..."),
    ],
    ids=["workflow-refusal", "snakemake-error", "parse-error", "nothing-said"],
)
def test_the_failure_line_is_never_snakemakes_preamble(stdout, stderr, expected):
    line = failure_line(stdout, stderr, 1)
    assert line.startswith(expected) and "Using profile" not in line, line


def _plan(*args: str) -> subprocess.CompletedProcess:
    # --site-limits none: the refusals under test are the site file's and the profile's; where a SLURM cluster is up,
    # its limits would add a line, and a note that it cannot be reached while a cluster test restarts its controller.
    return subprocess.run(
        [sys.executable, "-m", "wneurons.cli", "plan", "config/demo.yaml", "--no-disk", "--site-limits", "none", *args],
        cwd=REPO, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.mark.slow
def test_plan_shows_the_site_refusal_and_a_missing_profile_in_one_line(tmp_path):
    (tmp_path / "site.yaml").write_text("max_mem_mb: 1500\n")
    for args, expected in (
        (["--site", str(tmp_path / "site.yaml")], "site: max_mem_mb 1,500 MB (site file, max_mem_mb) is below what "),
        (["--profile", "profiles/nowhere"], "--profile profiles/nowhere: no such profile"),
    ):
        proc = _plan(*args)
        lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(expected), proc.stdout + proc.stderr
