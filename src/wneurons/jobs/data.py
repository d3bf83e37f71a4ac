"""Jobs of ``workflow/rules/data.smk``: the data sets, verified against the repository's checksums, the GGUF
models converted once into plain safetensors directories, and the capability suite's lm-eval tasks (written from
WikiText-2 here, or staged from the hub on the submit host)."""

from __future__ import annotations


def fetch_data_job(spec: dict, out_dir: str) -> dict:
    """Copy or download one data set into ``out_dir`` and verify it against the repository's checksums."""
    from wneurons.store.data import fetch_dataset, read_checksums

    return fetch_dataset(
        out_dir,
        read_checksums(spec["checksums"]),
        local_dir=spec.get("local_dir"),
        url=spec.get("url"),
        archive_sha256=spec.get("archive_sha256"),
    )


def convert_gguf_model_job(gguf: dict, out_dir: str) -> dict:
    """Convert a GGUF model source (``{"source": "gguf_wheel" | "gguf_file", <source>: <value>}``) into a
    safetensors model directory (once)."""
    from wneurons.lm.models import convert_gguf_source

    return convert_gguf_source(gguf["source"], gguf[gguf["source"]], out_dir)


def capability_tasks_job(wikitext_dir: str, out_dir: str) -> dict:
    """The offline capability tasks (``wikitext2_cloze``, ``wikitext2_lastword``) written from the verified
    WikiText-2 validation split into ``out_dir`` (:func:`wneurons.store.lmeval_tasks.write_wikitext_tasks`)."""
    from wneurons.store.lmeval_tasks import write_wikitext_tasks

    return write_wikitext_tasks(wikitext_dir, out_dir)


def stage_lmeval_tasks_job(tasks: list[str], out_dir: str) -> dict:
    """lm-eval hub ``tasks`` loaded once into a datasets cache at ``out_dir`` (needs the hub: the submit host);
    :func:`wneurons.store.lmeval_tasks.stage_hub_tasks_into`."""
    from wneurons.store.lmeval_tasks import stage_hub_tasks_into

    return stage_hub_tasks_into(out_dir, tasks)
