"""Resume after ``kill -9`` and retry after an OOM-style kill, on the tiny project with the real Snakefile.

One uninterrupted reference run; then one run that is killed (``kill -9`` of Snakemake and every job process) at
three moments: during ``collect_activations``, during a ``score_ablation`` job, during ``aggregate_scores``. After
each kill the same command is run again (after ``--unlock``: Snakemake's lock files survive a kill -9, and
without it the rerun stops with LockException). Checked after each kill: no process survives, every result file
that exists parses (atomic writes: a killed job leaves nothing that looks finished), the killed jobs' outputs are
absent. Checked at the end: the rerun completed, files finished before a kill were never rewritten, every job
finished exactly once over all segments, and the result tree equals the reference bit for bit.

A job's finish is counted from what Snakemake recorded, not from its report alone: Snakemake removes a job's
incomplete markers first and prints "Finished jobid" after, so a kill between the two leaves a finished job that
the killed run never reported (:func:`finished_in_run`).

The kill points run as one chain (each rerun is the run killed at the next point), so the file costs about two
full runs of the tiny DAG.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import polars as pl
import pytest
from tiny_project import dry_run_jobs, make_tiny_project, snakemake_command

from wneurons.experiment import paths
from wneurons.experiment.grid import Condition
from wneurons.report.compare import compare_result_trees

pytestmark = pytest.mark.slow

# What profiles/slurm sets, on the local executor. Two 2-thread jobs at a time: job start-up (imports) dominates
# the tiny DAG, and each job's torch thread count is its rule's `threads` whatever --cores is, so results do not
# depend on it.
RUN_ARGS = ("--cores", "4", "--rerun-incomplete", "--keep-going", "all")
RUN_TIMEOUT_S = 900
POLL_S = 0.05
FINISHED = re.compile(r"Finished jobid: (\d+) \(Rule: (\w+)\)")
JOB_START = re.compile(r"(?:local)?rule (\w+):")
RESOURCES = re.compile(r"resources: .*\bmem_mb=(\d+).*")


# ---------------------------------------------------------------- processes
def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids of every process on the machine (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # exited meanwhile
            continue
        # The command name (field 2) may contain spaces and parentheses; the fields after it do not.
        ppid = int(text[text.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(stat.parent.name))
    return children


def descendants(pid: int) -> list[int]:
    """Pids of every process below ``pid``."""
    tree, found, todo = _children(), [], [pid]
    while todo:
        kids = tree.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie does not count)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2] != "Z"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def start(
    root: Path, log: Path, *args: str, threads: bool = True, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """Start Snakemake in ``root`` in its own process group (its jobs inherit the group), output to ``log``;
    ``threads``: jobs in threads of Snakemake's process (profiles/local), else one process per job (as SLURM);
    ``env``: variables added to this process's environment."""
    with open(log, "w") as fh:
        return subprocess.Popen(
            snakemake_command(root, *args, threads=threads),
            env=os.environ | (env or {}),
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def kill_run(proc: subprocess.Popen) -> dict[int, str]:
    """``kill -9`` Snakemake, its process group and every descendant (by pid); return {pid: command line}."""
    pids = [proc.pid, *descendants(proc.pid)]
    commands = {pid: cmdline(pid) for pid in pids}
    os.killpg(proc.pid, signal.SIGKILL)
    for pid in pids:  # a job that left the group would survive killpg
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    return commands


def wait_until(proc: subprocess.Popen, moment: Callable[[], object], what: str, log: Path) -> object:
    """Poll ``moment()`` until it returns something truthy (returned); fail if the run ends or times out first."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        if found := moment():
            return found
        if proc.poll() is not None:
            pytest.fail(f"run ended (rc {proc.returncode}) before {what}:\n{log.read_text()[-3000:]}")
        time.sleep(POLL_S)
    proc.kill()
    pytest.fail(f"timed out waiting for {what}")


def finish(proc: subprocess.Popen, log: Path) -> str:
    """Wait for a run to end; fail with its output unless it succeeded; return the output."""
    try:
        proc.wait(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        kill_run(proc)
        pytest.fail(f"run timed out after {RUN_TIMEOUT_S} s")
    out = log.read_text()
    assert proc.returncode == 0, f"snakemake failed ({proc.returncode}):\n{out[-5000:]}"
    return out


def finished_jobs(output: str) -> Counter:
    """Jobs per rule that a Snakemake run reports as finished."""
    return Counter(rule for _, rule in FINISHED.findall(output))


Job = tuple[str, tuple[str, ...]]  # (rule, outputs): a job of the DAG, the same in every run of it


def announced_jobs(output: str) -> dict[int, Job]:
    """jobid -> (rule, outputs) of every job a Snakemake run's output announced (the block it prints when the job
    starts: ``localrule x:``, indented fields with ``output:`` and ``jobid:``)."""
    jobs: dict[int, Job] = {}
    rule, outputs = None, ()
    for line in output.splitlines():
        if match := JOB_START.fullmatch(line):
            rule, outputs = match.group(1), ()
        elif rule is None or not line.startswith("    "):
            rule = None
        elif line.startswith("    output: "):
            outputs = tuple(line.removeprefix("    output: ").split(", "))
        elif line.startswith("    jobid: "):
            jobs[int(line.removeprefix("    jobid: "))] = (rule, outputs)
    return jobs


def reported_jobs(output: str) -> set[Job]:
    """The jobs a Snakemake run's output reports finished."""
    jobs = announced_jobs(output)
    return {jobs[int(jobid)] for jobid, _ in FINISHED.findall(output)}


# ---------------------------------------------------------------- workflow state
def running_outputs(root: Path) -> list[str]:
    """Outputs of the jobs running now: Snakemake's incomplete markers (file name = urlsafe base64 of the path;
    names over the file system's limit are split into '@'-prefixed folders)."""
    marker_dir = root / ".snakemake/incomplete"
    outputs = []
    for marker in marker_dir.rglob("*") if marker_dir.is_dir() else []:
        if marker.is_file():
            encoded = "".join(part.lstrip("@") for part in marker.relative_to(marker_dir).parts)
            outputs.append(base64.urlsafe_b64decode(encoded).decode())
    return sorted(outputs)


def wildcards_of(template: str, path: str) -> dict[str, str] | None:
    """The values of ``template``'s ``{name}`` parts in ``path`` (one path component each), or None."""
    pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(template))
    match = re.fullmatch(pattern, path)
    return match.groupdict() if match else None


SHARDS = paths.shards("{model}", "{revision}")
CONDITION = Condition("{scope}", "{selector}", "{percent}", "{trial}")
ABLATION = paths.ablation("{model}", "{revision}", CONDITION, "{benchmark}")
AGGREGATE = paths.aggregate("{model}", "{revision}", "{benchmark}")
# output template -> (rule, log stem): the logs mirror the output's wildcards (see the rules)
JOB_LOGS = {
    SHARDS: ("collect_activations", "{model}/{revision}"),
    ABLATION: ("score_ablation", "{model}/{revision}/{scope}/{selector}/p{percent}/t{trial}/{benchmark}"),
    AGGREGATE: ("aggregate_scores", "{model}/{revision}/{benchmark}"),
}


def job_log(output: str) -> Path:
    """The log file of the job writing ``output`` (a shard folder, a scored JSON or an aggregate)."""
    for template, (rule, stem) in JOB_LOGS.items():
        if (wildcards := wildcards_of(template, output)) is not None:
            return Path(paths.log_file(rule, stem.format(**wildcards)))
    raise ValueError(f"no log mapping for {output}")


def job_running(
    root: Path, matches: Callable[[str], bool], min_done: int = 0, done_glob: str = "", opened: bool = True
) -> list[str]:
    """Outputs of running jobs that match, once each has opened its log (i.e. is past its imports and doing its
    work; unless not ``opened``) and at least ``min_done`` files match ``done_glob``; else an empty list."""
    if min_done and len(list(root.glob(done_glob))) < min_done:
        return []
    return [o for o in running_outputs(root) if matches(o) and (not opened or (root / job_log(o)).exists())]


def finished_in_run(output: str, root: Path) -> set[Job]:
    """Jobs a run finished, read once its processes are dead: those its output reports finished, and those it
    started whose outputs all exist without an incomplete marker. The second set holds the jobs a kill took after
    Snakemake recorded them (markers removed) and before it printed "Finished jobid"; a job whose outputs were
    not all written, or still carry the marker set at its start, did not finish and runs again."""
    running = set(running_outputs(root))
    recorded = {
        (rule, outputs)
        for rule, outputs in announced_jobs(output).values()
        if outputs and all((root / o).exists() and o not in running for o in outputs)
    }
    return reported_jobs(output) | recorded


def result_files(root: Path, exclude: Sequence[str] = ()) -> dict[str, int]:
    """Every finished-looking file of the run (not hidden temp files), except those of the outputs (files or
    folders) in ``exclude`` -> its mtime in ns. Activation shards are temporary (deleted once read): only their
    kept hard links count."""
    files = {}
    for top in (paths.RESULTS, paths.DATA, paths.KEPT_ACTIVATIONS):
        for p in (root / top).rglob("*") if (root / top).is_dir() else []:
            rel = p.relative_to(root)
            hidden = any(part.startswith(".") for part in rel.parts)
            excluded = any(rel == Path(e) or Path(e) in rel.parents for e in exclude)
            if p.is_file() and not hidden and not excluded:
                files[str(rel)] = p.stat().st_mtime_ns
    return files


def assert_nothing_partial(root: Path) -> None:
    """Every JSON / parquet file and shard folder that exists is complete (readable)."""
    for rel in result_files(root):
        path = root / rel
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".parquet":
            pl.read_parquet(path)
    for shard_dir in [*root.glob(paths.shards("*", "*")), *root.glob(paths.kept_shards("*", "*"))]:
        if not shard_dir.name.startswith("."):
            json.loads((shard_dir / "index.json").read_text())


def shard_digests(root: Path) -> dict[str, str]:
    """sha256 of every kept activation shard file (the .npy arrays compare_result_trees does not look at; the
    temporary shards are gone after a complete run, their kept hard links are not)."""
    base = root / paths.KEPT_ACTIVATIONS
    return {
        str(p.relative_to(base)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(base.rglob("*.npy"))
        if not any(part.startswith(".") for part in p.relative_to(base).parts)
    }


# ---------------------------------------------------------------- the runs
@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, Counter]:
    """An uninterrupted run: its project folder and its finished jobs per rule."""
    root = tmp_path_factory.mktemp("reference")
    make_tiny_project(root)
    log = root / "run.log"
    out = finish(start(root, log, *RUN_ARGS), log)
    return root, finished_jobs(out)


ANY = {k: "*" for k in ("model", "revision", "scope", "selector", "percent", "trial", "benchmark")}
# (name, which running outputs count, files that must be finished already, how many, wait for the job's log)
KILL_POINTS = [
    ("collect_activations", lambda o: wildcards_of(SHARDS, o) is not None, "", 0, True),
    ("score_ablation", lambda o: wildcards_of(ABLATION, o) is not None, ABLATION.format_map(ANY), 2, True),
    # An aggregate job lasts a few tens of milliseconds, less than a poll on a busy machine (CI once saw the run
    # end without catching one): until that kill, each waits DELAY_S before its work (WNEURONS_INJECT_DELAY_ONLY),
    # and it counts as running from its incomplete marker, as its log opens only after the wait.
    ("aggregate_scores", lambda o: wildcards_of(AGGREGATE, o) is not None, "", 0, False),
]
DELAY_S = 3


def test_kill_minus_9_at_three_moments_then_resume(reference, tmp_path):
    ref_root, ref_jobs = reference
    root = tmp_path / "resumed"
    make_tiny_project(root)
    finished: list[set[Job]] = []  # per segment
    before_kill: dict[str, int] = {}  # files finished before some kill -> mtime then
    report = []
    delays_off = root.parent / "delays-off"
    delay = {"WNEURONS_INJECT_DELAY": f"{DELAY_S}:{delays_off}", "WNEURONS_INJECT_DELAY_ONLY": "aggregate_scores.py"}
    proc = start(root, root / "run0.log", *RUN_ARGS, env=delay)
    for i, (name, matches, done_glob, min_done, opened) in enumerate(KILL_POINTS):
        log = root / f"run{i}.log"
        running = lambda m=matches, g=done_glob, n=min_done, o=opened: job_running(root, m, n, g, o)  # noqa: E731
        wait_until(proc, running, f"a {name} job", log)
        killed = kill_run(proc)
        assert not [p for p in killed if alive(p)], f"processes survived the kill at {name}"
        finished.append(finished_in_run(log.read_text(), root))  # the run is dead: log and markers hold still
        assert_nothing_partial(root)
        # Every job running at the kill, not only the one waited for (jobs run in threads of Snakemake's process:
        # the kill of that process is the kill of every job). A job killed after its atomic write but before
        # Snakemake recorded it as done has a complete output; it stays marked incomplete and is rerun.
        killed_outputs = running_outputs(root)
        assert killed_outputs, f"no job was running at the kill at {name}"
        scripts = [o.split("/")[-1] for o in killed_outputs]
        files = result_files(root, exclude=killed_outputs)
        before_kill = files | before_kill  # keep the mtime seen at the first kill
        written = [o for o in killed_outputs if (root / o).exists()]
        temps = [str(p.relative_to(root)) for p in root.glob("res*/**/.*.tmp")]
        report.append(f"kill at {name}: {len(killed)} processes {scripts}; running {killed_outputs}; kept {len(files)}")
        report.append(f"  outputs already written by killed jobs (rerun): {written}; temp files left: {temps}")
        unreported = finished[-1] - reported_jobs(log.read_text())
        report.append(f"  finished, but the kill came before Snakemake reported it: {sorted(unreported)}")

        # The same command again. Snakemake's lock files survive kill -9 and must be removed first.
        subprocess.run(snakemake_command(root, "--unlock", *RUN_ARGS), check=True, capture_output=True)
        if i == len(KILL_POINTS) - 1:
            delays_off.touch()
        proc = start(root, root / f"run{i + 1}.log", *RUN_ARGS, env=delay)
    out = finish(proc, root / f"run{len(KILL_POINTS)}.log")
    finished.append(finished_in_run(out, root))
    print("\n".join(report))

    assert running_outputs(root) == [], "incomplete markers left after the final run"
    rewritten = [f for f, mtime in before_kill.items() if (root / f).stat().st_mtime_ns != mtime]
    assert rewritten == [], f"finished before a kill, but recomputed: {rewritten}"
    # Every job of the DAG finished exactly once over the four segments: none redone, none lost.
    redone = [job for i, jobs in enumerate(finished) for job in jobs if any(job in f for f in finished[:i])]
    assert redone == [], f"finished in two segments: {redone}"
    assert Counter(rule for jobs in finished for rule, _ in jobs) == ref_jobs
    assert dry_run_jobs(root) == {}
    assert compare_result_trees(ref_root / "results", root / "results") == []
    assert shard_digests(ref_root), "no kept shards to compare"
    assert shard_digests(root) == shard_digests(ref_root)


def test_job_killed_like_an_oom_is_retried_with_more_memory(reference, tmp_path):
    ref_root, _ = reference
    root = tmp_path / "retry"
    shutil.copytree(ref_root, root, symlinks=True, ignore=shutil.ignore_patterns("locks", "run*.log"))
    target = paths.clean("tiny-llama", "main", "ppl")
    job_log_path = root / paths.log_file("score_clean", "tiny-llama/main/ppl")
    for path in (root / target, job_log_path):
        path.unlink()
    log = root / "retry.log"
    # One process per job, as under SLURM (in threads of one process, an OOM kill takes Snakemake with it: that is
    # the kill -9 test above). Snakemake spawns each `run:` job as `python -m snakemake --target-jobs ...`.
    proc = start(root, log, "--cores", "2", "--retries", "1", target, threads=False)
    # The log opens once the job is past its imports: from then on it holds the model (what an OOM kill hits).
    wait_until(proc, job_log_path.exists, "the score_clean job", log)
    jobs = [p for p in descendants(proc.pid) if re.search(r"--target-jobs\S* \S*score_clean", cmdline(p))]
    assert jobs, f"no score_clean job process under snakemake: {[cmdline(p) for p in descendants(proc.pid)]}"
    for pid in jobs:
        os.kill(pid, signal.SIGKILL)  # what the kernel's / SLURM's OOM killer does
    out = finish(proc, log)

    requested = [int(m) for m in RESOURCES.findall(out)]
    assert len(requested) == 2, f"expected two attempts, got resources lines {requested}:\n{out}"
    assert requested[1] > requested[0], f"attempt 2 must request more mem_mb: {requested}"
    assert finished_jobs(out) == Counter({"score_clean": 1})
    assert "Error in rule score_clean" in out  # attempt 1 failed ...
    clean = str(Path(target).parent)
    assert compare_result_trees(ref_root / clean, root / clean) == []  # ... and attempt 2 gave the same result


def test_a_job_the_kill_took_before_its_report_counts_as_finished(tmp_path):
    """The accounting of the kill test on a run cut off as Snakemake cuts it: job 1 reported, job 2 recorded (its
    outputs there, no marker) but killed before its report, job 3 killed while running (outputs written, marker
    left), job 4 killed before it wrote anything."""
    outputs = {1: "results/a.json", 2: "results/b.json", 3: "results/c.json", 4: "results/d.json"}
    blocks = [
        f"[Wed Dec  2 02:00:42 2026]\nlocalrule r{i}:\n    input: x\n    output: {o}, {o}.log\n    jobid: {i}\n"
        f"    wildcards: w=1\n"
        for i, o in outputs.items()
    ]
    text = "".join(blocks[:3]) + "[Wed Dec  2 02:00:43 2026]\nFinished jobid: 1 (Rule: r1)\n" + blocks[3]
    for i in (1, 2, 3):
        for path in (outputs[i], outputs[i] + ".log"):
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_text("{}")
    marker = tmp_path / ".snakemake/incomplete" / base64.urlsafe_b64encode(outputs[3].encode()).decode()
    marker.parent.mkdir(parents=True)
    marker.touch()
    assert reported_jobs(text) == {("r1", (outputs[1], outputs[1] + ".log"))}
    assert finished_in_run(text, tmp_path) == {(f"r{i}", (outputs[i], outputs[i] + ".log")) for i in (1, 2)}
