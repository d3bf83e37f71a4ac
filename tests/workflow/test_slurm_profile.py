"""The SLURM profiles parse as Snakemake 9 options and carry the settings the workflow relies on.

No cluster needed: profiles are parsed with Snakemake's own argument parser, which rejects unknown keys.
The end-to-end check (a real localhost cluster) is `.ci/slurm/up.sh` + a run with both profiles.
"""

import re
from argparse import Namespace
from pathlib import Path

import pytest
import yaml
from snakemake.cli import get_argument_parser

from wneurons.experiment.rule_files import rules_with

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "profiles" / "slurm"
CI = ROOT / "profiles" / "slurm-ci"
CI_SLURM = ROOT / ".ci" / "slurm"


def parse_profiles(*profiles: Path) -> Namespace:
    """Return Snakemake's parsed options for `--profile p1 --profile p2 ...` (later profiles win)."""
    return get_argument_parser(profiles=[str(p) for p in profiles]).parse_args([])


def raw_profile(profile: Path) -> dict:
    """Return the profile's YAML mapping as written (keys with dashes, values unevaluated)."""
    return yaml.safe_load((profile / "config.yaml").read_text())


def ci_script_setting(script: str, pattern: str) -> str:
    """Return the first group of `pattern` in .ci/slurm/`script`, failing the test if it is absent."""
    path = CI_SLURM / script
    m = re.search(pattern, path.read_text(), flags=re.MULTILINE)
    assert m, f"{path}: no match for {pattern!r}"
    return m.group(1)


def evaluate_default(args: Namespace, name: str, attempt: int) -> int:
    """Return default resource `name` as Snakemake evaluates it for a rule without inputs at `attempt`."""
    resource = args.default_resources[name]
    kwargs = dict(wildcards={}, input=[], attempt=attempt, threads=1, rulename="r", async_run=None)
    return resource.evaluate(**kwargs).value


@pytest.fixture(scope="module")
def base_args() -> Namespace:
    return parse_profiles(BASE)


@pytest.fixture(scope="module")
def ci_args() -> Namespace:
    return parse_profiles(BASE, CI)


def test_unknown_profile_key_is_rejected(tmp_path):
    # Guards the tests below: parsing must fail on a key that is no Snakemake option.
    (tmp_path / "config.yaml").write_text("executor: slurm\nslurm-no-such-option: 1\n")
    with pytest.raises(SystemExit):
        parse_profiles(tmp_path)


def test_base_profile_settings(base_args):
    assert base_args.executor == "wneurons-slurm"
    assert base_args.jobs > 0
    assert base_args.retries == 3
    # One copy of an allocation at any time: SLURM never requeues, the executor resubmits what is left.
    assert base_args.wneurons_slurm_no_requeue and base_args.keep_incomplete
    assert base_args.group_components == {"gpu-allocation": 1000000} or "gpu-allocation" in str(
        base_args.group_components
    )
    assert base_args.rerun_incomplete and base_args.keep_going and base_args.printshellcmds
    assert base_args.latency_wait > 0
    assert base_args.wneurons_slurm_init_seconds_before_status_checks > 0
    assert {"mem_mb", "runtime"} <= set(base_args.default_resources)
    # The plugin turns `threads` into --cpus-per-task unless cpus_per_task is set, which would then
    # override every rule's threads.
    assert "cpus_per_task" not in base_args.default_resources


@pytest.mark.parametrize("name", ["mem_mb", "runtime"])
def test_default_resources_grow_with_attempt(base_args, name):
    values = [evaluate_default(base_args, name, attempt) for attempt in (1, 2, 3)]
    assert all(isinstance(v, int) and v > 0 for v in values), values
    assert values == sorted(set(values)), f"{name} must grow on every retry, got {values}"


@pytest.mark.parametrize("overlay", [CI, ROOT / "profiles" / "site.example"], ids=["slurm-ci", "site.example"])
def test_overlays_change_only_site_facts(base_args, overlay):
    args = parse_profiles(BASE, overlay)
    assert args.executor == base_args.executor
    assert args.retries == base_args.retries
    base, over = raw_profile(BASE), raw_profile(overlay)
    # `default-resources` is replaced wholesale by the overlay, so its restated defaults must not drift.
    defaults = dict(over["default-resources"])
    defaults.pop("slurm_partition", None)
    assert defaults == base["default-resources"]
    # The site file the overlay names.
    (site,) = [c for c in over["config"] if c.startswith("site=")]
    assert site.startswith(f"site=profiles/{overlay.name.replace('.example', '')}/site.yaml")


def test_ci_overlay_matches_ci_cluster(ci_args):
    partition = ci_script_setting("lib.sh", r"^PARTITION=\$\{SLURM_CI_PARTITION:-(\w+)\}")
    assert evaluate_default(ci_args, "slurm_partition", 1) == partition
    # No slurmdbd on the CI cluster: sacct would hang Snakemake, squeue works while finished jobs stay
    # visible, i.e. MinJobAge >= 3 x init seconds (below that the plugin falls back to sacct).
    assert ci_args.wneurons_slurm_status_command == "squeue"
    min_job_age = int(ci_script_setting("up.sh", r"^MinJobAge=(\d+)"))
    assert 3 * ci_args.wneurons_slurm_init_seconds_before_status_checks <= min_job_age


@pytest.mark.parametrize("profile", [BASE, CI, ROOT / "profiles/site.example"], ids=["slurm", "slurm-ci", "site"])
def test_every_top_level_key_is_commented(profile):
    lines = (profile / "config.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"[\w-]+:", line):
            assert i > 0 and lines[i - 1].startswith("#"), f"{profile.name}/config.yaml:{i + 1} {line!r}"


def test_gpu_jobs_are_submitted_in_allocations_of_their_checkpoint(tmp_path):
    """Through profiles/slurm, every job of a GPU rule sits in a group job (allocation) of its (model, revision),
    local rules are not submitted, and the grid needs far fewer submissions than it has jobs
    (docs/performance.md)."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from tiny_project import make_tiny_project, snakemake

    make_tiny_project(tmp_path)
    out = snakemake(tmp_path, "all", "-n", "--forceall", "--profile", str(BASE)).stdout
    groups = re.findall(r"Group job (gpu-\S+) \(jobs", out)
    jobs = re.findall(r"^(\s*)rule (\w+):$", out, flags=re.MULTILINE)
    gpu_rules = rules_with("gpu=1,", ROOT)
    assert len(gpu_rules) >= 5 and groups and len(groups) == len(set(groups))
    assert all(indent for indent, rule in jobs if rule in gpu_rules), "a GPU job outside its checkpoint's group"
    submitted = len(groups) + sum(not indent and rule not in LOCAL_RULES for indent, rule in jobs)
    assert submitted * 3 <= len(jobs), (submitted, len(jobs))


LOCAL_RULES = rules_with("localrule: True", ROOT)


def test_a_job_longer_than_the_site_allows_stops_the_plan_in_one_line(tmp_path):
    """A site whose walltime limit one job alone exceeds: the dry run through profiles/slurm stops while the DAG is
    built, in one line naming the job and the limit, with no traceback and nothing submitted."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from tiny_project import make_tiny_project, snakemake

    make_tiny_project(tmp_path)
    site = tmp_path / "site.yaml"
    site.write_text("max_runtime: 5\ntflops: 0.000001\n")  # a GPU 10^5 times slower than the CI's CPU
    proc = snakemake(tmp_path, "all", "-n", "--profile", str(BASE), "--config", f"site={site}", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out
    last = [line for line in out.splitlines() if line.strip()][-1]
    assert re.match(r"site: \w+ tiny-llama/main\S* needs \d+ minutes, more than the site's max_runtime 5 ", last), last
