"""The pieces of the SLURM path that need no cluster: the allocation plan (experiment/allocations.py), the ledger of
finished members (jobs/ledger.py), the allocation's target filtering, and the wneurons-slurm executor's two seams in
the slurm plugin (secrets never reach sbatch; PREEMPTED is a failure)."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

import snakemake_executor_plugin_wneurons_slurm as executor
from snakemake_executor_plugin_wneurons_slurm.allocation import without_finished
from wneurons.experiment import allocations, workload
from wneurons.experiment.allocations import Planner, Site, checkpoint_jobs, job_key, pack
from wneurons.experiment.config import validate_config
from wneurons.jobs import ledger

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow/schemas/config.schema.yaml"


def config_of(name: str) -> dict:
    return validate_config(yaml.safe_load((REPO / "config" / name).read_text()), SCHEMA)


# ---------------------------------------------------------------- packing
def test_pack_fills_each_allocation_up_to_the_limit_with_one_margin_and_one_load():
    indices, asked = pack([1.6, 2.0, 1.25, 3.0, 0.5], load=2.0, limit=10, margin=2.0)
    # 1.6 + 2.0 + 1.25, once more the largest (2.0) and the load 2: 8.85 -> 9; with 3.0: 7.85 + 3.0 + 2 > 10, a new
    # allocation: 3.0 + 0.5 + 3.0 + 2 = 8.5 -> 9
    assert indices == [0, 0, 0, 1, 1]
    sums = [sum(a for a, i in zip(asked, indices, strict=True) if i == k) for k in range(2)]
    assert sums == [math.ceil(4.85 + 2.0 + 2), math.ceil(3.5 + 3.0 + 2)]
    assert asked[0] > asked[1] > asked[2] and asked[3] > asked[4]  # the first carries the load; then in proportion


@pytest.mark.parametrize("config_name", ["config.yaml", "demo.yaml"])
@pytest.mark.parametrize("limit", [15, 120, 1440])
def test_every_allocation_of_every_checkpoint_fits_the_site(config_name, limit):
    config = config_of(config_name)
    planner = Planner(config, Site(max_runtime=limit, tflops=0.1 if config_name == "demo.yaml" else None))
    for model, spec in config["models"].items():
        revisions = {spec["final_revision"], *spec["checkpoints"], *spec["weight_checkpoints"]}
        for revision in revisions:
            try:
                plan = planner.plan(model, revision)
            except allocations.AllocationTooLong as err:
                assert f"max_runtime {limit}" in str(err) and limit < 1440
                continue
            sums = {}
            for index, minutes in plan.values():
                sums[index] = sums.get(index, 0) + minutes
            assert all(s <= limit for s in sums.values()), (model, revision, sums)
            assert sorted(sums) == list(range(len(sums)))


def test_packing_order_never_puts_a_job_before_one_it_reads():
    """Collection < statistics < clean and ablations < matched searches < matched ablations, by allocation index,
    so no allocation is left and re-entered."""
    config = config_of("demo.yaml")
    planner = Planner(config, Site(max_runtime=15, tflops=0.1))
    plan = planner.plan("smollm2-135m", "main")
    jobs = checkpoint_jobs(config, "smollm2-135m", "main")
    index = {job_key(r, w): plan[job_key(r, w)][0] for r, w in jobs}
    by_rule = {}
    for r, w in jobs:
        by_rule.setdefault((r, w.get("selector") == "matched"), []).append(index[job_key(r, w)])
    collect, stats = by_rule[("collect_activations", False)], by_rule[("neuron_stats", False)]
    assert max(collect) <= min(stats) <= min(by_rule[("score_ablation", False)])
    # (the capability suite's ablations pack last, after the searches: they read none of them but the matched ones)
    unmatched = [
        index[job_key(r, w)]
        for r, w in jobs
        if r == "score_ablation" and w["selector"] != "matched" and w["benchmark"] != "capability"
    ]
    assert max(unmatched) <= min(by_rule[("matched_search", False)])
    assert max(by_rule[("matched_search", False)]) <= min(by_rule[("score_ablation", True)])
    assert len(set(index.values())) > 1  # the CI site's 15 minutes split the demo's SmolLM2 checkpoint


def test_a_job_longer_than_the_site_allows_is_one_line_naming_it():
    config = config_of("config.yaml")
    with pytest.raises(allocations.AllocationTooLong, match=r"^\w+ pythia-12b/step143000\S* needs \d+ minutes"):
        Planner(config, Site(max_runtime=10)).plan("pythia-12b", "step143000")


def test_runtime_comes_from_work_not_from_the_model_alone():
    config = config_of("config.yaml")
    site = Site()
    base = {"model": "pythia-1.4b", "revision": "step143000"}
    blimp = allocations.job_minutes(config, site, "score_clean", base | {"benchmark": "blimp"})
    ppl = allocations.job_minutes(config, site, "score_clean", base | {"benchmark": "ppl"})
    big = allocations.job_minutes(config, site, "score_clean", base | {"model": "pythia-12b", "benchmark": "blimp"})
    assert blimp != ppl and big > 5 * blimp


def test_blimp_work_counts_the_pairs_an_offset_leaves():
    # 1,000 pairs per paradigm: at offset 990 only 10 are left to score, whatever blimp_pairs_per_paradigm says.
    per = {"blimp_pairs_per_paradigm": 100}
    assert workload.blimp_tokens(per | {"blimp_pairs_offset": 990}) == workload.blimp_tokens(per) / 10
    assert workload.blimp_tokens(per | {"blimp_pairs_offset": 900}) == workload.blimp_tokens(per)
    assert workload.blimp_tokens(per | {"blimp_pairs_offset": 1000}) == 0


# ---------------------------------------------------------------- the site file
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_runtim: 60\n", "unknown key 'max_runtim'"),
        ("max_runtime: soon\n", "max_runtime 'soon' is not a number"),
        ("max_runtime: 2\n", "max_runtime 2 minutes"),
        ("margin: 0.5\n", "margin 0.5"),
        ("gpu_partition: 3\n", "gpu_partition 3 is not a string"),
        ("- a\n", "not a mapping"),
    ],
)
def test_a_bad_site_file_is_one_line_naming_file_and_key(tmp_path, text, message):
    path = tmp_path / "site.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as err:
        Site.from_file(str(path))
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_the_example_site_file_and_the_ci_site_file_are_valid():
    example = Site.from_file(str(REPO / "profiles/site.example/site.yaml"))
    assert example.max_runtime == 1440
    ci = Site.from_file(str(REPO / "profiles/slurm-ci/site.yaml"))
    # The CI site states only its speed: its limits are the cluster's own, read through `site_limits=slurm`.
    assert ci.tflops and ci.max_runtime == Site().max_runtime and ci.max_mem_mb is None


def test_gpu_site_resources_are_only_those_set():
    assert Site().gpu_resources() == {}
    site = Site(gpu_partition="gpu", gpu_model="a100")
    assert site.gpu_resources() == {"slurm_partition": "gpu", "gpu_model": "a100"}


# ---------------------------------------------------------------- the ledger
def test_ledger_finished_members_are_dropped_and_temporary_outputs_need_not_exist(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    manifest = ledger.manifest_path("run-1", "gpu-m-r-a0")
    members = [
        ("collect_activations:model=m,revision=r", ["shards"], ["shards"]),
        ("score_clean:model=m,revision=r,benchmark=tse", ["tse.json", "tse.items.parquet"], []),
        ("score_clean:model=m,revision=r,benchmark=ppl", ["ppl.json"], []),
    ]
    ledger.write_manifest(manifest, members)
    assert ledger.unfinished_members(manifest) == [t for t, _, _ in members]
    # collection finished and its temporary shards are gone; tse finished; ppl wrote a file but no record (killed)
    ledger.record_finished(["shards"], manifest)
    for f in ("tse.json", "tse.items.parquet", "ppl.json"):
        Path(f).write_text("x")
    ledger.record_finished(["tse.items.parquet", "tse.json"], manifest)
    assert ledger.unfinished_members(manifest) == ["score_clean:model=m,revision=r,benchmark=ppl"]
    # a finished member whose (non-temporary) output was deleted runs again
    Path("tse.json").unlink()
    assert "score_clean:model=m,revision=r,benchmark=tse" in ledger.unfinished_members(manifest)


def test_outside_an_allocation_nothing_is_recorded(monkeypatch):
    monkeypatch.delenv(ledger.MANIFEST_VARIABLE, raising=False)
    assert ledger.record_finished(["a"]) is None


def test_the_allocation_runs_only_unfinished_targets():
    argv = ["--snakefile", "S", "--target-jobs", "a:x=1", "b:x=2", "c:x=3", "--allowed-rules", "a", "b", "c"]
    assert without_finished(argv, ["b:x=2"]) == [
        "--snakefile",
        "S",
        "--target-jobs",
        "b:x=2",
        "--allowed-rules",
        "a",
        "b",
        "c",
    ]
    assert without_finished(["--cores", "2"], ["a"]) == ["--cores", "2"]


# ---------------------------------------------------------------- the executor's seams in the slurm plugin
def test_sbatch_never_sees_the_hub_token():
    import snakemake_executor_plugin_slurm as slurm

    assert getattr(slurm.get_submit_command, "wneurons", False), "the seam moved: pin or adapt the executor"
    build = executor._without_secrets(lambda *a, **k: "sbatch --parsable --export=ALL -t 52 --mem 2006 --wrap=x")
    assert build(_Job()).startswith("env -u HF_TOKEN -u HUGGING_FACE_HUB_TOKEN -u HF_HUB_TOKEN sbatch ")


def test_a_timed_out_allocation_asks_the_walltime_its_ledger_measured(monkeypatch):
    """After a TIMEOUT the next sbatch of that job asks the grown walltime; other jobs' calls are untouched."""
    build = executor._without_secrets(lambda *a, **k: "sbatch --parsable -t 52 --mem 2006 --wrap=x")
    monkeypatch.setitem(executor.WALLTIME, _Job.jobid, 97)
    assert " -t 97 --mem 2006 " in build(_Job())
    other = type("Other", (), {"jobid": 8})()
    assert " -t 52 --mem 2006 " in build(other)
    # Members of seconds each, left after a restart, ask 0 minutes: the plugin would submit no walltime at all.
    no_time = executor._without_secrets(lambda *a, **k: "sbatch --parsable --mem 2006 --wrap=x")
    assert f"sbatch -t {executor.MIN_WALLTIME} --parsable" in no_time(other)


def timing_out(monkeypatch, runtimes: list[int], finished: int, asked: int = 15):
    """An executor whose allocation of members planned at ``runtimes`` minutes asked ``asked`` and finished its
    first ``finished`` members before its TIMEOUT; the executor and the members."""
    ex = bare_executor(monkeypatch)
    ex._left_at_submit, ex._idle_timeouts = {}, {}
    members = [type("Member", (), {"resources": {"runtime": r}})() for r in runtimes]
    monkeypatch.setattr(executor, "members_of", lambda job: members)
    monkeypatch.setattr(executor, "member_entry", lambda m: ("t", [], []))
    monkeypatch.setattr(executor, "wait_until_gone", lambda jobid: True)
    monkeypatch.setattr(executor, "remove_outputs", lambda *a: [])
    monkeypatch.setattr(executor.slurm_site, "MAX_RUNTIME", 240)
    monkeypatch.setattr(ex, "asked", lambda job: (asked, 2000), raising=False)
    monkeypatch.setattr(executor, "WALLTIME", {})
    monkeypatch.setattr(executor, "unfinished_members", lambda job, manifest: members[finished:])
    return ex, members


def test_timeouts_grow_the_walltime_from_progress_and_stop_after_two_without_any(monkeypatch):
    ex, members = timing_out(monkeypatch, [10, 10, 20], finished=1)
    ex.timed_out(_Info("5"))  # 15 min finished 10 planned minutes: 30 planned left -> 30 * 1.5 * 1.25 = 57
    assert executor.WALLTIME[_Job.jobid] == 57 and ex.calls[-1] == ("run_job", 7)
    ex._left_at_submit[_Job.jobid] = members[1:]
    ex.timed_out(_Info("6"))  # nothing finished: the walltime doubles once ...
    assert executor.WALLTIME[_Job.jobid] == 114 and ex.calls[-1] == ("run_job", 7)
    ex.timed_out(_Info("7"))  # ... and a second attempt without progress stops, naming the keys
    assert ex._for_good == {7} and "`tflops`" in ex.calls[-1][1] and "timed out twice" in ex.calls[-1][1]


def test_members_planned_at_seconds_are_grown_at_the_attempts_pace_per_member(monkeypatch):
    """The demo on the CI cluster's CPUs at the stated GPU rates: the first member carries the allocation's whole
    minutes (its load; allocations.spread), the 37 others ask 0. An attempt of 3 minutes finished 2 members: the 36
    left count 3 / 2 minutes each (x 1.25), where planned minutes alone asked 1 minute, less than the attempt that ran
    out of time (seen on the CI cluster: 3 -> 1 min, then 2 -> 1)."""
    ex, _ = timing_out(monkeypatch, [3] + [0] * 37, finished=2, asked=3)
    ex.timed_out(_Info("5"))
    assert executor.WALLTIME[_Job.jobid] == math.ceil(36 * 3 / 2 * 1.25)
    # Members with planned minutes keep being scaled by them; those of 0 minutes add the per-member pace.
    assert executor.left_minutes([20, 0], asked=15, planned_done=10, finished=1) == 20 * 15 / 10 + 15


def test_site_events_reach_the_plugin_as_running_and_the_executor_first():
    """PREEMPTED, NODE_FAIL and BOOT_FAIL are the executor's to handle (resubmitted without a retry): the plugin's
    status check sees them as running, so it neither waits forever on PREEMPTED nor spends a retry on NODE_FAIL."""
    import snakemake_executor_plugin_slurm as slurm

    assert getattr(slurm.query_job_status, "wneurons", False), "the seam moved: pin or adapt the executor"

    async def base(command, logger):
        states = {"11": "RUNNING", "12": "PREEMPTED", "13": "COMPLETED", "14": "NODE_FAIL", "15": "BOOT_FAIL"}
        return states | {"16": "CANCELLED by 0", "17": "", "18": "TIMEOUT"}, 0.01

    statuses, _ = asyncio.run(executor._site_events_left_to_executor(base)("squeue ...", None))
    assert statuses == {
        "11": "RUNNING",
        "12": "RUNNING",
        "13": "COMPLETED",
        "14": "RUNNING",
        "15": "RUNNING",
        "16": "CANCELLED by 0",
        "17": "",
        "18": "RUNNING",
    }


def test_earlier_allocations_of_this_directory_are_found(monkeypatch, tmp_path):
    out = (
        f"101|RUNNING|{tmp_path}|rule_gpu-m-r-a0\n"
        f"102|PENDING|{tmp_path}|rule_gpu-m-r-a1\n"
        f"103|COMPLETED|{tmp_path}|rule_gpu-m-r-a2\n"
        f"104|RUNNING|/elsewhere|rule_gpu-m-r-a0\n"
        f"105|RUNNING|{tmp_path}|an interactive job\n"
    )

    class Done:
        stdout = out

    monkeypatch.setattr(executor.subprocess, "run", lambda *a, **k: Done())
    found = executor.earlier_allocations(str(tmp_path.resolve()), user="u")
    assert [(f.jobid, f.state) for f in found] == [("101", "RUNNING"), ("102", "PENDING")]
    assert str(found[1]) == "102 (PENDING, rule_gpu-m-r-a1)"  # as the restart's line names it


def test_a_failed_allocation_is_waited_for_until_its_processes_ended(monkeypatch):
    """TIMEOUT / CANCELLED come while the allocation's processes still have KillWait seconds, in which a member can
    finish and record itself: the ledger is read only once squeue no longer lists the job running or completing."""
    answers = iter(["TIMEOUT\n", "COMPLETING\n", "COMPLETING\n", "TIMEOUT\n"])
    asked = []

    class Answer:
        returncode, stderr = 0, ""

        def __init__(self, stdout):
            self.stdout = stdout

    def squeue(cmd, **kw):
        asked.append(cmd)
        return Answer(next(answers))

    monkeypatch.setattr(executor.subprocess, "run", squeue)
    monkeypatch.setattr(executor.time, "sleep", lambda s: None)
    # The first answer is already terminal (nothing listed as active): a job that never completed is not waited on.
    assert executor.wait_until_gone("7") and len(asked) == 1
    assert executor.wait_until_gone("7") and len(asked) == 4  # COMPLETING twice, then gone
    assert asked[0] == ["squeue", "-h", "-j", "7", "-o", "%T"]

    class Gone:
        returncode, stdout, stderr = 1, "", "slurm_load_jobs error: Invalid job id specified"

    monkeypatch.setattr(executor.subprocess, "run", lambda cmd, **kw: Gone())
    assert executor.wait_until_gone("7")
    monkeypatch.setattr(executor.subprocess, "run", lambda cmd, **kw: Answer("RUNNING\n"))
    assert not executor.wait_until_gone("7", timeout=0)


class _Job:
    jobid, name, restart_times, attempt = 7, "gpu-m-r-a0", 3, 1


class _Info:
    def __init__(self, external_jobid=None):
        self.job, self.external_jobid = _Job(), external_jobid


class _Log:
    def __init__(self):
        self.lines = []

    def warning(self, msg):
        self.lines.append(msg)

    error = info = warning


def bare_executor(monkeypatch) -> executor.Executor:
    """An executor without a workflow (no __post_init__): what the methods below read, and their calls recorded."""
    ex = executor.Executor.__new__(executor.Executor)
    ex.logger, ex._resubmitted, ex._for_good, ex._seen, ex._misses, ex._ours = _Log(), {}, set(), set(), {}, set()
    ex._never_start = {}
    ex.calls = []
    monkeypatch.setattr(ex, "run_job", lambda job: ex.calls.append(("run_job", job.jobid)), raising=False)
    monkeypatch.setattr(ex, "report_job_success", lambda info: ex.calls.append(("success",)), raising=False)
    monkeypatch.setattr(ex, "report_job_error", lambda info, msg=None: ex.calls.append(("error", msg)), raising=False)
    monkeypatch.setattr(ex, "manifest_of", lambda job: None, raising=False)
    monkeypatch.setattr(executor.time, "sleep", lambda s: ex.calls.append(("sleep", s)))
    return ex


def test_a_transient_sbatch_refusal_is_submitted_again_without_a_retry(monkeypatch):
    ex = bare_executor(monkeypatch)
    down = "SLURM sbatch failed. The error message was 'sbatch: error: Unable to contact slurm controller'"
    ex._report_job_error_threadsafe(_Info(), down)
    ex._report_job_error_threadsafe(_Info(), down)
    assert ex.calls == [("sleep", 5), ("run_job", 7), ("sleep", 10), ("run_job", 7)]  # back-off, no error reported
    assert "retries untouched" in ex.logger.lines[0] and not ex._for_good


def test_a_limit_refusal_ends_the_allocation_for_good_in_one_line(monkeypatch):
    ex = bare_executor(monkeypatch)
    plugin_report = lambda self, info, msg: self.report_job_error(info, msg)  # noqa: E731 (the plugin, no loop)
    monkeypatch.setattr(executor.SlurmExecutor, "_report_job_error_threadsafe", plugin_report)
    monkeypatch.setattr(ex, "request_line", lambda info, why: f"can never start: {why}", raising=False)
    refusal = "sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some)"
    ex._report_job_error_threadsafe(_Info(), f"SLURM sbatch failed. The error message was '{refusal}'")
    line = f"can never start: sbatch refuses it (SLURM sbatch failed. The error message was '{refusal}')"
    assert ex.calls == [("error", line)]
    assert ex._for_good == {7} and ("sleep", 5) not in ex.calls

    job = _Job()
    monkeypatch.setattr(executor.SlurmExecutor, "handle_job_error", lambda self, job: None)
    ex.handle_job_error(job)  # what Snakemake's scheduler calls before it decides on a retry
    assert job._attempt == job.restart_times + 1  # restart_times > attempt - 1 no longer holds: no retry


def test_a_job_squeue_forgot_is_judged_by_its_ledger(monkeypatch):
    ex = bare_executor(monkeypatch)
    monkeypatch.setattr(executor, "members_of", lambda job: [1, 2, 3])
    left = [[], ["one member"]]
    monkeypatch.setattr(executor, "unfinished", lambda job, manifest: left.pop(0))
    ex._seen.add("41")  # listed before, gone now (purged after MinJobAge): judged at once
    assert ex.site_event(_Info("41"), {}) and ex.calls == [("success",)]
    # Never listed: judged only after MISSES_BEFORE_GONE checks in a row, then by the ledger (one member left).
    misses = [ex.site_event(_Info("42"), {}) for _ in range(executor.MISSES_BEFORE_GONE)]
    assert misses == [False] * (executor.MISSES_BEFORE_GONE - 1) + [True]
    assert ex.calls[-1][0] == "error" and "1 unfinished" in ex.calls[-1][1]


def test_a_job_the_plugin_neither_reported_nor_kept_stays_active(monkeypatch):
    """The slurm plugin drops every job when its status query fails (it falls back to sacct where MinJobAge is
    below 3 x the init seconds, and sacct fails without accounting): the executor keeps them active."""
    ex = bare_executor(monkeypatch)
    ex.run_uuid, ex.next_seconds_between_status_checks = "run", 3
    ex.workflow = SimpleNamespace(executor_settings=SimpleNamespace(max_seconds_between_status_checks=3))

    async def plugin_check(self, jobs):  # its query failed: nothing yielded, nothing reported
        for _ in ():
            yield _

    monkeypatch.setattr(executor.SlurmExecutor, "check_active_jobs", plugin_check)
    monkeypatch.setattr(executor, "site_states", lambda run: {"5": ("RUNNING", "None"), "6": ("RUNNING", "None")})
    running, reported = _Info("5"), _Info("6")
    running.aux, reported.aux = {}, {executor.REPORTED: True}

    async def check():
        return [j async for j in ex.check_active_jobs([running, reported])]

    assert asyncio.run(check()) == [running]


def test_a_refused_submission_without_aux_is_marked_reported():
    """sbatch refused: the plugin reports a SubmittedJobInfo(job) whose aux is None (seen: the mark raised in the
    submitting thread, the report never reached the scheduler and the run waited forever)."""
    from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

    refused = SubmittedJobInfo(_Job())
    assert refused.aux is None
    executor.mark_reported(refused)
    assert refused.aux == {executor.REPORTED: True}


def test_a_pending_reason_no_wait_clears_ends_the_allocation_once_it_holds(monkeypatch):
    """Held for good at NEVER_START_CHECKS checks in a row (a first reason may be replaced at the next scheduling
    pass): then cancelled and ended without a retry, naming the last reason."""
    ex = bare_executor(monkeypatch)
    monkeypatch.setattr(executor.subprocess, "run", lambda cmd, **kw: ex.calls.append(tuple(cmd)))
    monkeypatch.setattr(ex, "request_line", lambda info, why: f"can never start: {why}", raising=False)
    info = _Info("9")
    assert not ex.site_event(info, {"9": ("PENDING", "PartitionConfig")})
    assert not ex.site_event(info, {"9": ("PENDING", "Priority")})  # a reason that clears: the count starts over
    assert not ex.site_event(info, {"9": ("PENDING", "PartitionConfig")})
    assert ex.site_event(info, {"9": ("PENDING", "PartitionTimeLimit")})
    assert ex.calls == [("scancel", "9"), ("error", "can never start: SLURM holds it PENDING (PartitionTimeLimit)")]
    assert ex._for_good == {7}
