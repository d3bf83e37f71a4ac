"""Reading a SLURM site's limits and classifying what it does to a job (wneurons.experiment.slurm_site), on the
recorded output of the real commands (scontrol / sinfo / sacctmgr of slurm 22.05); the live cluster is read by
tests/workflow/test_slurm_faults.py."""

from __future__ import annotations

import pytest

from wneurons.experiment import slurm_site
from wneurons.experiment.allocations import Site

PARTITIONS = (
    "PartitionName=ci AllowGroups=ALL Default=YES QoS=N/A DefaultTime=NONE MaxNodes=UNLIMITED MaxTime=00:15:00 "
    "MaxMemPerNode=UNLIMITED Nodes=vm PreemptMode=REQUEUE\n"
    "PartitionName=gpu AllowGroups=ALL Default=NO QoS=long MaxTime=1-12:00:00 MaxMemPerNode=512000 Nodes=g[1-2]\n"
)
CONFIG = "Configuration data as of 2026-12-05T01:00:00\nEnforcePartLimits       = NO\nMinJobAge               = 600\n"


def fake(answers: dict[str, str], failing: tuple[str, ...] = ()):
    def run(cmd: list[str]) -> str:
        key = " ".join(cmd[:3])
        if any(key.startswith(f) for f in failing):
            raise slurm_site.SiteQueryError(f"`{' '.join(cmd)}` failed (rc 1): accounting storage is disabled")
        return next(v for k, v in answers.items() if key.startswith(k))

    return run


ANSWERS = {
    "scontrol show partition": PARTITIONS,
    "sinfo -h -p": "19284|gpu:2\n",
    "scontrol show config": CONFIG,
    "sacctmgr -nP show": "04:00:00\n",
}


def test_durations_read_as_slurm_writes_them():
    assert slurm_site.slurm_minutes("00:15:00") == 15
    assert slurm_site.slurm_minutes("1-12:00:00") == 36 * 60
    assert slurm_site.slurm_minutes("00:14:30") == 15  # a partial minute counts as one
    assert slurm_site.slurm_minutes("90") == 90
    assert slurm_site.slurm_minutes("UNLIMITED") is None and slurm_site.slurm_minutes("INFINITE") is None
    assert slurm_site.gres_gpus("gpu:h100:4(S:0-1)") == 4 and slurm_site.gres_gpus("(null)") == 0


def test_the_default_partition_or_the_named_one_with_its_qos():
    default = slurm_site.read_limits(run=fake(ANSWERS))
    assert (default.partition, default.max_time_min, default.max_mem_mb, default.gpus_per_node) == ("ci", 15, 19284, 2)
    assert default.qos_max_wall_min is None and default.enforce_part_limits == "NO"
    gpu = slurm_site.read_limits("gpu", run=fake(ANSWERS | {"sinfo -h -p": "1024000|gpu:h100:8\n"}))
    # The partition allows 36 h, its QOS 4 h: the lower one plans; memory is the partition's cap, below the node's.
    assert (gpu.max_time_min, gpu.qos_max_wall_min, gpu.max_runtime, gpu.max_mem_mb) == (2160, 240, 240, 512000)
    no_accounting = slurm_site.read_limits("gpu", run=fake(ANSWERS, failing=("sacctmgr",)))
    assert no_accounting.qos_max_wall_min is None and no_accounting.max_runtime == 2160
    with pytest.raises(slurm_site.SiteQueryError, match="partition 'a100' not found .*ci, gpu"):
        slurm_site.read_limits("a100", run=fake(ANSWERS))


def test_the_site_file_wins_and_a_disagreement_is_one_line(tmp_path):
    limits = slurm_site.read_limits(run=fake(ANSWERS))
    read, notes = slurm_site.with_limits(Site(), set(), limits, None)
    assert (read.max_runtime, read.max_mem_mb) == (15, 19284) and len(notes) == 1
    over = Site(max_runtime=600)
    kept, notes = slurm_site.with_limits(over, {"max_runtime"}, limits, "site.yaml")
    assert kept.max_runtime == 600 and kept.max_mem_mb == 19284
    assert len(notes) == 2 and "site.yaml sets max_runtime 600 min, above what partition ci allows (15 min)" in notes[1]
    assert slurm_site.limit_source("max_runtime", set(), limits).startswith("read from SLURM: partition ci")
    assert slurm_site.limit_source("max_runtime", {"max_runtime"}, limits) == "site file, max_runtime"


def test_an_unreachable_site_plans_with_the_file_and_says_why(monkeypatch):
    monkeypatch.setattr(slurm_site, "READ_ERROR", None)
    site, notes = slurm_site.site_from_slurm(Site(), None, run=fake(ANSWERS, failing=("scontrol",)))
    assert site == Site() and slurm_site.READ_ERROR.startswith("site_limits: slurm: `scontrol show partition -o`")
    assert notes == [f"{slurm_site.READ_ERROR}; planned with the defaults (1440 min per allocation) instead"]
    site, _ = slurm_site.site_from_slurm(Site(), None, run=fake(ANSWERS))
    assert site.max_runtime == 15 and slurm_site.READ_ERROR is None


def test_what_one_process_read_is_handed_to_the_dry_run_it_starts(monkeypatch):
    """`wneurons plan` reads the site, its dry run's Snakefile takes that reading (the limits, or why SLURM could not
    be asked) from the environment instead of asking again (tests/workflow/test_cli.py counts the calls)."""
    for name in ("READ_ERROR", "LIMITS", "MAX_RUNTIME"):
        monkeypatch.setattr(slurm_site, name, None)
    assert slurm_site.handed_on() == {}
    slurm_site.site_from_slurm(Site(), None, run=fake(ANSWERS))
    monkeypatch.setenv(slurm_site.READ_VARIABLE, slurm_site.handed_on()[slurm_site.READ_VARIABLE])
    never = fake({}, failing=("scontrol", "sinfo", "sacctmgr"))  # SLURM is not asked again
    site, notes = slurm_site.site_from_slurm(Site(), None, run=never)
    assert (site.max_runtime, site.max_mem_mb) == (15, 19284) and notes[0].startswith("site_limits: read partition ci")
    monkeypatch.delenv(slurm_site.READ_VARIABLE)
    slurm_site.site_from_slurm(Site(), None, run=fake(ANSWERS, failing=("scontrol",)))
    monkeypatch.setenv(slurm_site.READ_VARIABLE, slurm_site.handed_on()[slurm_site.READ_VARIABLE])
    site, notes = slurm_site.site_from_slurm(Site(), None, run=fake(ANSWERS))  # SLURM answers now, and is not asked
    assert site == Site() and notes[0].startswith("site_limits: slurm: `scontrol show partition -o` failed (rc 1)")


@pytest.mark.parametrize(
    ("reason", "never"),
    [
        ("PartitionTimeLimit", True),
        ("QOSMaxWallDurationPerJobLimit", True),
        ("AssocMaxMemPerJob", True),
        ("MaxMemPerLimit", True),
        ("InvalidQOS", True),
        ("Resources", False),
        ("Priority", False),
        ("AssocGrpCpuLimit", False),  # a group limit: clears as the group's other jobs end
        ("ReqNodeNotAvail, UnavailableNodes:vm", False),  # clears when the node returns
        ("None", False),
    ],
)
def test_pending_reasons_that_no_wait_clears(reason, never):
    assert slurm_site.never_starts(reason) is never


def test_states_and_refusals_classified():
    assert slurm_site.classify_state("PREEMPTED", False) == slurm_site.RESUBMIT
    assert slurm_site.classify_state("NODE_FAIL", False) == slurm_site.RESUBMIT
    assert slurm_site.classify_state("CANCELLED", cancelled_by_us=False) == slurm_site.STOP
    assert slurm_site.classify_state("CANCELLED", cancelled_by_us=True) == slurm_site.RETRY
    assert slurm_site.classify_state("TIMEOUT", False) == slurm_site.GROW
    assert slurm_site.classify_state("OUT_OF_MEMORY", False) == slurm_site.RETRY
    assert slurm_site.classify_state("RUNNING", False) is None and slurm_site.classify_state("COMPLETED", False) is None
    limit = "sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some)"
    assert slurm_site.classify_refusal(limit) == slurm_site.LIMIT
    busy = "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"
    assert slurm_site.classify_refusal(busy) == slurm_site.TRANSIENT
    assert slurm_site.classify_refusal("sbatch: error: something new") is None
    line = slurm_site.request_line("gpu-m-r-a0", "7", 45, 4000, "SLURM holds it PENDING (PartitionTimeLimit)", None)
    assert "asks 45 min and 4,000 MB" in line and "(SLURM job 7)" in line
    assert "lower `max_runtime` in the site file" in line


@pytest.mark.parametrize(
    ("why", "keys"),
    [
        ("SLURM holds it PENDING (PartitionTimeLimit)", "`max_runtime`"),
        ("SLURM holds it PENDING (QOSMaxWallDurationPerJobLimit)", "`max_runtime`"),
        (
            "sbatch refuses it (sbatch: error: Requested time limit is invalid (missing or exceeds some limit))",
            "`max_runtime`",
        ),
        ("SLURM holds it PENDING (MaxMemPerLimit)", "`max_mem_mb`"),
        ("SLURM holds it PENDING (AssocMaxMemPerJob)", "`max_mem_mb`"),
        ("sbatch refuses it (sbatch: error: Memory required by task is not available)", "`max_mem_mb`"),
        ("SLURM holds it PENDING (PartitionNodeLimit)", "`max_runtime` / `max_mem_mb`"),
    ],
)
def test_the_line_names_the_key_of_the_limit_exceeded(why, keys):
    """Time reasons name max_runtime, memory reasons max_mem_mb, a reason naming neither both."""
    line = slurm_site.request_line("gpu-m-r-a0", None, 45, 4000, why, None)
    assert f"Fix: lower {keys} in the site file" in line, line
