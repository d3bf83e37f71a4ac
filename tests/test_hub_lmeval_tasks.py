"""The capability suite's five hub datasets staged through the localhost hub (tests/hub_server.py) under the
installed ``datasets`` (5.x) and lm-eval, then read offline as the scoring jobs read them (issue 27, C12).

The repositories are local stand-ins: the dataset ids, config names, splits and fields lm-eval's task YAMLs name,
as parquet files in the layout the hub's parquet repositories have (``{config}/{split}-00000-of-00001.parquet``
with a README ``configs:`` block, or ``data/{split}-...`` for a default config), a few rows each. What the real
repositories hold today (parquet or a loading script, their revisions, their sizes) is not checked from here
(no internet): docs/performance.md, "Capability datasets". A repository with a loading script is refused by
``datasets`` >= 4; staging names the task and the script in one line.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hub_server import DATASETS, ConnectionCounter, HubServer

from wneurons.store.lmeval_tasks import HUB_SUITE, STAGED_FILE

pytestmark = pytest.mark.slow
ROWS = 6


def parquet(rows: list[dict]) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buffer)
    return buffer.getvalue()


def card(config: str, splits: list[str]) -> bytes:
    """A dataset card whose ``configs:`` block maps a config's splits to its parquet files."""
    files = "".join(f"  - split: {s}\n    path: {config}/{s}-*\n" for s in splits)
    return f"---\nconfigs:\n- config_name: {config}\n  data_files:\n{files}---\n# stand-in\n".encode()


def arc(i: int) -> dict:
    labels = ["A", "B", "C", "D"]
    return {
        "id": f"q{i}",
        "question": f"Which one is {i}?",
        "choices": {"text": [f"answer {k}" for k in range(4)], "label": labels},
        "answerKey": labels[i % 4],
    }


def hellaswag(i: int) -> dict:
    return {
        "ind": i,
        "activity_label": "Cooking",
        "ctx_a": "A man is in a kitchen.",
        "ctx_b": "he",
        "ctx": "A man is in a kitchen. he",
        "endings": ["cuts a tomato.", "flies away.", "sings.", "sleeps."],
        "source_id": f"s{i}",
        "split": "val",
        "split_type": "indomain",
        "label": str(i % 4),
    }


# lm-eval task -> (dataset id, {path: rows}); the fields each task's YAML reads.
REPOS: dict[str, tuple[str, dict[str, list[dict]]]] = {
    "arc_easy": (
        "allenai/ai2_arc",
        {f"ARC-Easy/{s}": [arc(i) for i in range(ROWS)] for s in ("train", "validation", "test")},
    ),
    "piqa": (
        "baber/piqa",
        {
            f"data/{s}": [{"goal": f"g{i}", "sol1": "a", "sol2": "b", "label": i % 2} for i in range(ROWS)]
            for s in ("train", "validation")
        },
    ),
    "hellaswag": (
        "Rowan/hellaswag",
        {f"data/{s}": [hellaswag(i) for i in range(ROWS)] for s in ("train", "validation")},
    ),
    "winogrande": (
        "allenai/winogrande",
        {
            f"winogrande_xl/{s}": [
                {"sentence": f"The cup is in the _ {i}.", "option1": "box", "option2": "bag", "answer": str(1 + i % 2)}
                for i in range(ROWS)
            ]
            for s in ("train", "validation")
        },
    ),
    "lambada_openai": (
        "EleutherAI/lambada_openai",
        {"default/test": [{"text": f"the dog {i} barks at the cat"} for i in range(ROWS)]},
    ),
}


def add_parquet_repo(srv: HubServer, repo_id: str, tables: dict[str, list[dict]]) -> None:
    files = {f"{path}-00000-of-00001.parquet": parquet(rows) for path, rows in tables.items()}
    config = next(iter(tables)).split("/")[0]
    if config != "data":  # a named config: declared in the card, as on the hub
        files["README.md"] = card(config, [p.split("/")[1] for p in tables])
    srv.add_revision(DATASETS + repo_id, "main", files)


def run(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
    )


def hub_env(srv: HubServer, home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    return env | {"HF_ENDPOINT": srv.url, "HF_HOME": str(home), "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}


STAGE = "from wneurons.store.lmeval_tasks import main; main(['--cache-dir', {cache!r}, '--tasks', *{tasks!r}])"
READ_OFFLINE = """
import json
from lm_eval.tasks import TaskManager
from wneurons.store.lmeval_tasks import staged_datasets
with staged_datasets({cache!r}):
    tasks = TaskManager().load({tasks!r})["tasks"]
    print(json.dumps({{name: len(task.eval_docs) for name, task in tasks.items()}}))
"""


def test_the_five_capability_datasets_stage_and_read_offline(tmp_path):
    tasks = sorted(HUB_SUITE)
    cache = str(tmp_path / "lmeval-hub")
    with HubServer() as srv:
        for task in tasks:
            add_parquet_repo(srv, *REPOS[task])
        env = hub_env(srv, tmp_path / "hf-home")
        staged = run(STAGE.format(cache=cache, tasks=tasks), env)
        assert staged.returncode == 0, staged.stderr[-4000:]
        asked = [p for _, _, p, _ in srv.requests if "/datasets/" in p]
    assert {p.split("/")[2] + "/" + p.split("/")[3] for p in asked if p.startswith("/datasets/")} == {
        REPOS[t][0] for t in tasks
    }
    record = json.loads((Path(cache) / STAGED_FILE).read_text())
    assert record["datasets_version"].split(".")[0] >= "4"  # the datasets that refuses loading scripts
    for task in tasks:
        staged_task = record["tasks"][task]
        assert staged_task["dataset_path"] == REPOS[task][0] and staged_task["n_eval_docs"] == ROWS
    # Offline, as a scoring job on a compute node reads: not one connection to the hub (a listener that counts them
    # stands in for it; a refused or retried request would be hidden by the cache's fallback, and cost ~23 s each).
    with ConnectionCounter() as hub:
        env = hub_env(srv, tmp_path / "hf-home") | {"HF_ENDPOINT": hub.url}
        read = run(READ_OFFLINE.format(cache=cache, tasks=tasks), env)
    assert read.returncode == 0, read.stderr[-4000:]
    assert hub.count == 0, f"{hub.count} connection(s) to the hub from an offline read"
    assert json.loads(read.stdout.strip().splitlines()[-1]) == dict.fromkeys(tasks, ROWS)


def test_a_dataset_with_a_loading_script_is_one_line_naming_task_and_script(tmp_path):
    with HubServer() as srv:
        srv.add_revision(
            DATASETS + "Rowan/hellaswag", "main", {"hellaswag.py": b"import datasets\n", "README.md": b"# x\n"}
        )
        staged = run(STAGE.format(cache=str(tmp_path / "c"), tasks=["hellaswag"]), hub_env(srv, tmp_path / "home"))
    assert staged.returncode != 0
    last = staged.stderr.strip().splitlines()[-1]
    assert "hellaswag" in last and "Rowan/hellaswag" in last and "hellaswag.py" in last, staged.stderr[-3000:]
    assert not (tmp_path / "c").exists()  # nothing that looks staged
