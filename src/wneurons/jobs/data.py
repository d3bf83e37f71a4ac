"""Jobs of ``workflow/rules/data.smk``: the data sets, verified against the repository's checksums, and the GGUF
models converted once into plain safetensors directories."""

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
