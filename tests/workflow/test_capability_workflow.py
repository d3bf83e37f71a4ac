"""The capability suite through the real Snakefile on the tiny project: the WikiText-2 lm-eval tasks written by the
data rule, scored clean and under the wasserstein ablation by the scoring rules, killed (``kill -9``) during the
ablation's capability job and resumed; the per-item log-likelihoods of both jobs equal those of lm-eval run
directly (``simple_evaluate`` on ``HFLM``) on the same model under the same clamp, and the aggregate and paired
statistics read them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import polars as pl
import pytest
import torch
import yaml
from tiny_project import capability_suite, make_tiny_project, snakemake, snakemake_command

from wneurons.experiment import paths
from wneurons.experiment.grid import CAPABILITY, Condition
from wneurons.lm.lmeval import select_items
from wneurons.store.data import SOURCE_FILE
from wneurons.store.lmeval_tasks import ITEMS_FILE, WIKITEXT_TASKS

pytest.importorskip("lm_eval")
pytestmark = pytest.mark.slow

MODEL, MAIN = "tiny-llama", "main"
LIMIT = 5
W = Condition("all", "wasserstein", "5", 0)
TIMEOUT_S = 600


def capability_project(root: Path) -> None:
    """The tiny project with the WikiText-2 capability tasks, LIMIT documents each (:func:`capability_suite`)."""
    make_tiny_project(root)
    config = yaml.safe_load((root / "config.yaml").read_text())
    config["evaluation"]["capability"] = capability_suite(root, LIMIT)
    (root / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def harness_direct(root: Path, neurons: dict[int, list[int]], batch_size: int) -> dict:
    """lm-eval on its own (no wneurons scoring code) on the project's model under the clamp of ``neurons``;
    per (task, doc_id) the log-likelihoods of the choices, on the same documents as the jobs."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from wneurons.lm.ablation import clamp_negative_preactivations

    model = AutoModelForCausalLM.from_pretrained(root / "model", torch_dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(root / "model")
    tasks_dir = root / paths.capability_tasks("wikitext2")
    n_docs = len((tasks_dir / ITEMS_FILE).read_text().splitlines())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the jobs (threads: 1)
    try:
        with clamp_negative_preactivations(model, {k: torch.tensor(v) for k, v in neurons.items()}):
            results = lm_eval.simple_evaluate(
                model=HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size),
                tasks=list(WIKITEXT_TASKS),
                task_manager=TaskManager(include_path=str(tasks_dir), include_defaults=False),
                samples={t: select_items(n_docs, LIMIT, 1) for t in WIKITEXT_TASKS},
                log_samples=True,
                bootstrap_iters=0,
            )
    finally:
        torch.set_num_threads(threads)
    return {
        (task, s["doc_id"]): [ll for ll, _ in s["filtered_resps"]]
        for task in WIKITEXT_TASKS
        for s in results["samples"][task]
    }


def kill_group(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def test_capability_jobs_equal_lm_eval_directly_and_resume_after_a_kill(tmp_path, monkeypatch):
    root = tmp_path / "project"
    capability_project(root)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))
    clean_json = root / paths.clean(MODEL, MAIN, CAPABILITY)
    w_json = root / paths.ablation(MODEL, MAIN, W, CAPABILITY)
    w_log = root / paths.log_file("score_ablation", f"{MODEL}/{MAIN}/all/wasserstein/p5/t0/{CAPABILITY}")
    aggregate = root / paths.aggregate(MODEL, MAIN, CAPABILITY)
    paired = root / paths.paired(MODEL, MAIN, CAPABILITY)
    targets = [str(p.relative_to(root)) for p in (clean_json, w_json, aggregate, paired)]

    # A run killed while the ablation's capability job runs leaves no result of it behind...
    with open(tmp_path / "killed.log", "w") as fh:
        proc = subprocess.Popen(
            snakemake_command(root, "--cores", "1", *targets),
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    deadline = time.monotonic() + TIMEOUT_S
    while not w_log.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            kill_group(proc) if proc.poll() is None else None
            pytest.fail(f"the run ended before the capability job started:\n{(tmp_path / 'killed.log').read_text()}")
        time.sleep(0.05)
    kill_group(proc)
    assert not w_json.exists(), "the job finished before the kill: nothing was interrupted"
    assert not (root / paths.ablation_items(MODEL, MAIN, W, CAPABILITY)).exists()
    # ...and the same command, after --unlock, finishes it.
    snakemake(root, "--unlock", *targets)
    done = snakemake(root, "--cores", "1", "--rerun-incomplete", *targets)
    assert "score_ablation" in done.stdout + done.stderr

    tasks_dir = root / paths.capability_tasks("wikitext2")
    batch_size = yaml.safe_load((root / "config.yaml").read_text())["evaluation"]["batch_size"]
    for path, condition in ((clean_json, None), (w_json, W)):
        result = json.loads(path.read_text())
        neurons = {int(k): v for k, v in result["condition"].get("neurons", {}).items()}
        assert (condition is None) == (not neurons)
        items = pl.read_parquet(path.with_name(f"{CAPABILITY}.items.parquet"))
        assert items.height == 2 * LIMIT and items["item"].to_list() == list(range(2 * LIMIT))
        direct = harness_direct(root, neurons, batch_size)
        assert set(direct) == set(zip(items["task"], items["doc_id"], strict=True))
        for row in items.iter_rows(named=True):
            assert row["logprob_choices"] == direct[(row["task"], row["doc_id"])]  # equal, not close
        prov = result["provenance"]
        assert prov["convention"] == "lm-eval" and result["scores"]["project_convention"] == "authors"
        assert prov["data_sha256"] == json.loads((tasks_dir / SOURCE_FILE).read_text())["sha256"]
    clean_items = pl.read_parquet(root / paths.clean_items(MODEL, MAIN, CAPABILITY))
    w_items = pl.read_parquet(root / paths.ablation_items(MODEL, MAIN, W, CAPABILITY))
    assert clean_items.select("task", "doc_id").equals(w_items.select("task", "doc_id"))
    assert clean_items["logprob_choices"].to_list() != w_items["logprob_choices"].to_list()  # the clamp acted

    # The aggregate pools the random trials like BLiMP's; the paired table compares per task.
    summary = json.loads(aggregate.read_text())
    assert set(summary["conditions"]) == {"all/wasserstein/p5", "all/random/p5", "all/matched/p5"}
    assert summary["conditions"]["all/random/p5"]["n_trials"] == 2
    table = pl.read_parquet(paired)
    assert set(table["group"]) == {"all", *WIKITEXT_TASKS}
    assert {("all/matched/p5", "all/wasserstein/p5"), ("clean", "all/wasserstein/p5")} <= set(
        zip(table["reference"], table["condition"], strict=True)
    )
