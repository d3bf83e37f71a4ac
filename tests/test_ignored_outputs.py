"""What the workflow writes is never in the repository: every output root of wneurons.experiment.paths (and the
GGUF that `make gemma3` assembles) is ignored by git and holds no tracked file. A committed output is taken as
up to date by Snakemake on a clean clone, so it is never rebuilt there (the lm-eval task files once were, naming
another checkout's absolute paths)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from wneurons.experiment import paths

ROOT = Path(__file__).resolve().parents[1]

OUTPUT_ROOTS = (
    paths.RESULTS,
    paths.LOGS,
    paths.BENCHMARK_LOGS,
    paths.DATA,
    paths.ACTIVATIONS,
    paths.KEPT_ACTIVATIONS,
    paths.STAGED,
    paths.capability_tasks("wikitext2"),
    paths.capability_tasks("hub"),
    paths.converted_model("m"),
    paths.trained_suite("m"),
    "resources/gguf",  # Makefile: GEMMA3_GGUF
)


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def work_tree():
    if shutil.which("git") is None or _git("rev-parse", "--is-inside-work-tree").stdout.strip() != "true":
        pytest.skip("not a git work tree (an unpacked sdist)")


@pytest.mark.parametrize("root", OUTPUT_ROOTS)
def test_output_roots_are_ignored_and_untracked(work_tree, root):
    probe = f"{root}/any-output.json"
    assert _git("check-ignore", "-q", "--no-index", probe).returncode == 0, f"{root}/ is not in .gitignore"
    tracked = _git("ls-files", "--", root).stdout.split()
    assert not tracked, f"tracked files under the output root {root}/: {tracked[:5]}"
