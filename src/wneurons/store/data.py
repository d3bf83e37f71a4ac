"""Fetch and verify the evaluation data sets; read BLiMP, TSE and WikiText-2 into tables.

A data set is a flat folder of files named in a checksum file (``resources/checksums/<dataset>.sha256``).
:func:`fetch_dataset` copies them from a local mirror or downloads them from the pinned public source, checks
every sha256 and only then moves the folder into place. The readers never touch the network; they turn the
verified files into polars frames whose columns the scoring module consumes.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path, PurePosixPath
from typing import IO, Any

import numpy as np
import polars as pl

from wneurons.store.io import atomic_directory, sha256_files, write_json

# Pinned public copies (commits from the MANIFESTs under the shared data folder). Each entry can be
# splatted into fetch_dataset(dest, checksums, local_dir=..., **PUBLIC_SOURCES[name]); keys are the checksum
# file stems.
# Licences: BLiMP CC BY 4.0, LM_syneval MIT, WikiText-2 CC BY-SA 3.0. The TSE jsonl files are derived from the
# pickles by the data curator and have no public source of their own.
PUBLIC_SOURCES: dict[str, dict[str, str | None]] = {
    "blimp": {
        "url": "https://raw.githubusercontent.com/alexwarstadt/blimp/"
        "3e56b06fcabca9b30822fc66435fca6b1aa40bb1/data/{file}",
        "archive_sha256": None,
    },
    "tse-pickle": {
        "url": "https://raw.githubusercontent.com/BeckyMarvin/LM_syneval/"
        "edb737877a02092807ac55e165d653108b8e1509/EMNLP2018/templates/{file}",
        "archive_sha256": None,
    },
    "wikitext-2": {
        "url": "https://wikitext.smerity.com/wikitext-2-raw-v1.zip",
        "archive_sha256": "ef7edb566e3e2b2d31b29c1fdb0c89a4cc683597484c3dc2517919c615435a11",
    },
}

# Marvin & Linzen (2018) sub-task -> phenomenon family (LM_syneval EMNLP2018 templates).
TSE_FAMILIES: dict[str, str] = {
    **dict.fromkeys(
        [
            "simple_agrmt",
            "sent_comp",
            "vp_coord",
            "long_vp_coord",
            "prep_anim",
            "prep_inanim",
            "subj_rel",
            "obj_rel_across_anim",
            "obj_rel_across_inanim",
            "obj_rel_no_comp_across_anim",
            "obj_rel_no_comp_across_inanim",
            "obj_rel_within_anim",
            "obj_rel_within_inanim",
            "obj_rel_no_comp_within_anim",
            "obj_rel_no_comp_within_inanim",
        ],
        "subject_verb_agreement",
    ),
    **dict.fromkeys(["simple_reflexives", "reflexive_sent_comp", "reflexives_across"], "reflexive_anaphora"),
    **dict.fromkeys(
        ["simple_npi_anim", "simple_npi_inanim", "npi_across_anim", "npi_across_inanim"],
        "negative_polarity_items",
    ),
}
NPI_FAMILY = "negative_polarity_items"

BLIMP_SCHEMA = {
    "paradigm": pl.String,
    "linguistics_term": pl.String,
    "field": pl.String,
    "pair_id": pl.Int64,
    "sentence_good": pl.String,
    "sentence_bad": pl.String,
}
TSE_SCHEMA = {
    "task": pl.String,
    "family": pl.String,
    "condition": pl.String,
    "idx": pl.Int64,
    "sentence_good": pl.String,
    "sentence_bad": pl.String,
    "sentence_intrusive": pl.String,
}

_BLIMP_KEYS = ("UID", "linguistics_term", "field", "sentence_good", "sentence_bad")

SOURCE_FILE = "SOURCE.json"
# The two WikiText-2 splits the project reads: statistics and pair samples over test, perplexity over validation.
WIKITEXT_TEST = "wiki.test.raw"
WIKITEXT_VALID = "wiki.valid.raw"
DOWNLOAD_TIMEOUT_S = 60
_CHUNK = 1 << 20
_CHECKSUM_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")


class ChecksumError(ValueError):
    """A file's sha256 differs from the pinned digest."""

    def __init__(self, name: str, expected: str, actual: str):
        super().__init__(f"{name}: sha256 mismatch (expected {expected}, got {actual})")
        self.name, self.expected, self.actual = name, expected, actual


# --------------------------------------------------------------------------------------------- fetch + verify


def read_checksums(path: str | os.PathLike) -> dict[str, str]:
    """Parse a ``sha256sum`` file; returns {file name: lowercase hex sha256}. Blank lines are skipped."""
    checksums: dict[str, str] = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            match = _CHECKSUM_LINE.match(line)
            if match is None:
                raise ValueError(f"{path}:{lineno}: expected '<64 hex digits>  <file name>', got {line!r}")
            digest, name = match.groups()
            if name in checksums:
                raise ValueError(f"{path}:{lineno}: {name} listed twice")
            checksums[name] = digest.lower()
    if not checksums:
        raise ValueError(f"{path}: no checksums")
    return checksums


def fetch_dataset(
    dest_dir: str | os.PathLike,
    checksums: dict[str, str],
    *,
    local_dir: str | os.PathLike | None,
    url: str | None,
    archive_sha256: str | None = None,
) -> dict[str, Any]:
    """Materialise exactly the files named in ``checksums`` into ``dest_dir``, each verified by sha256.

    Source: ``local_dir`` if given and present (files at its top level), else ``url``: a template with
    ``{file}`` (one download per file) or a ``.zip`` archive (downloaded once, checked against
    ``archive_sha256`` if given; members are matched by base name). ``file://`` URLs work as well.
    The folder is assembled beside ``dest_dir`` and renamed into place only once every file verified, so a
    failure leaves nothing that looks fetched. An existing ``dest_dir`` is replaced only if it is empty or was
    written by this function (holds ``SOURCE.json``).

    Returns the provenance dict ``{"source": "local:<path>" | "url:<url>", "files": {name: sha256},
    "sha256": <digest over all files>}``, also written to ``dest_dir/SOURCE.json``.
    """
    _check_checksums(checksums)
    dest = Path(dest_dir)
    _check_replaceable(dest)
    source, fill = _choose_source(checksums, local_dir, url, archive_sha256, dest)
    with atomic_directory(dest) as build:
        fill(build)
        record = {
            "source": source,
            "files": dict(sorted(checksums.items())),
            "sha256": sha256_files([build / name for name in checksums]),
        }
        write_json(build / SOURCE_FILE, record)
    return record


def _check_checksums(checksums: dict[str, str]) -> None:
    # Names become paths: refuse anything that could escape the destination folder.
    if not checksums:
        raise ValueError("checksums is empty: nothing to fetch")
    for name, digest in checksums.items():
        if not name or name != Path(name).name or name in (".", "..", SOURCE_FILE):
            raise ValueError(f"checksum entry {name!r} is not a plain file name")
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ValueError(f"checksum for {name} is not 64 lowercase hex digits: {digest!r}")


def _check_replaceable(dest: Path) -> None:
    if dest.exists() and not (dest.is_dir() and (not any(dest.iterdir()) or (dest / SOURCE_FILE).exists())):
        raise FileExistsError(f"{dest} exists and was not written by fetch_dataset; remove it first")


def _choose_source(
    checksums: dict[str, str],
    local_dir: str | os.PathLike | None,
    url: str | None,
    archive_sha256: str | None,
    dest: Path,
) -> tuple[str, Callable[[Path], None]]:
    """The provenance label and a function that fills a build folder from the chosen source."""
    if local_dir is not None and Path(local_dir).is_dir():
        fill = partial(_copy_local, checksums=checksums, root=Path(local_dir))
        return f"local:{Path(local_dir).resolve()}", fill
    if not url:
        raise FileNotFoundError(f"no source for {dest}: local_dir {local_dir!r} is not a directory and url is {url!r}")
    if "{file}" in url:
        return f"url:{url}", partial(_download_each, checksums=checksums, template=url)
    if urllib.parse.urlparse(url).path.endswith(".zip"):
        return f"url:{url}", partial(_download_archive, checksums=checksums, url=url, archive_sha256=archive_sha256)
    raise ValueError(f"url must contain '{{file}}' or name a .zip archive: {url}")


def _write_verified(stream: IO[bytes], target: Path, expected: str | None, label: str | None = None) -> None:
    """Stream ``stream`` into ``target`` while hashing; raise :class:`ChecksumError` (naming ``label`` or the
    file name) if ``expected`` is given and differs."""
    digest = hashlib.sha256()
    with open(target, "wb") as out:
        while block := stream.read(_CHUNK):
            digest.update(block)
            out.write(block)
    if expected is not None and digest.hexdigest() != expected:
        raise ChecksumError(label or target.name, expected, digest.hexdigest())


def _copy_local(build: Path, *, checksums: dict[str, str], root: Path) -> None:
    missing = sorted(name for name in checksums if not (root / name).is_file())
    if missing:
        raise FileNotFoundError(f"{root}: missing {', '.join(missing)}")
    for name, expected in checksums.items():
        with open(root / name, "rb") as fh:
            _write_verified(fh, build / name, expected)


def _open_url(url: str, what: str) -> IO[bytes]:
    try:
        return urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S)
    except urllib.error.URLError as err:
        missing = getattr(err, "code", None) == 404 or isinstance(err.reason, FileNotFoundError)
        raise (FileNotFoundError if missing else OSError)(f"{what}: cannot download {url}: {err}") from err


def _download_each(build: Path, *, checksums: dict[str, str], template: str) -> None:
    for name, expected in checksums.items():
        file_url = template.replace("{file}", urllib.parse.quote(name))
        with _open_url(file_url, name) as response:
            _write_verified(response, build / name, expected)


def _download_archive(build: Path, *, checksums: dict[str, str], url: str, archive_sha256: str | None) -> None:
    # Inside the build folder so that a failure cleans it up too; removed before the folder goes live.
    archive = build / ".archive.zip"
    with _open_url(url, "archive") as response:
        _write_verified(response, archive, archive_sha256, label=url)
    with zipfile.ZipFile(archive) as zf:
        members: dict[str, zipfile.ZipInfo] = {}
        for info in zf.infolist():
            base = PurePosixPath(info.filename).name  # zip member names always use '/'
            if info.is_dir() or base not in checksums:
                continue
            if base in members:
                raise ValueError(f"{url}: {base} appears twice ({members[base].filename}, {info.filename})")
            members[base] = info
        missing = sorted(set(checksums) - set(members))
        if missing:
            raise FileNotFoundError(f"{url}: archive lacks {', '.join(missing)}")
        for base, info in members.items():
            with zf.open(info) as fh:
                _write_verified(fh, build / base, checksums[base])
    archive.unlink()


# ------------------------------------------------------------------------------------------------- readers


def _read_jsonl(path: Path, keys: tuple[str, ...]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, record) for each non-blank line; errors name file:line and the missing key."""
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{lineno}: invalid JSON: {err}") from err
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
            for key in keys:
                if key not in record:
                    raise ValueError(f"{path}:{lineno}: missing key {key!r}")
            yield lineno, record


def _as_int(value: Any, where: str) -> int:
    # BLiMP's GitHub copy stores pairID as a string ("0"); the hub copy as an int.
    try:
        return int(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: not an integer: {value!r}") from err


def _data_files(data_dir: str | os.PathLike, suffix: str) -> list[Path]:
    files = sorted(Path(data_dir).glob(f"*{suffix}"))
    if not files:
        raise FileNotFoundError(f"{data_dir}: no *{suffix} files")
    return files


def load_blimp(data_dir: str | os.PathLike, paradigms: list[str] | None = None) -> pl.DataFrame:
    """BLiMP minimal pairs from ``<data_dir>/<UID>.jsonl``, one row per pair, in file then line order.

    Returns columns paradigm (the UID), linguistics_term, field, pair_id (Int64), sentence_good,
    sentence_bad. ``paradigms`` selects files by UID, in the order given (None: all, sorted by name).
    """
    if paradigms is None:
        files = _data_files(data_dir, ".jsonl")
    else:
        if len(set(paradigms)) != len(paradigms):
            raise ValueError(f"paradigms lists a name twice: {paradigms}")
        files = [Path(data_dir) / f"{uid}.jsonl" for uid in paradigms]
        missing = [f.stem for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(f"{data_dir}: no BLiMP paradigm {', '.join(missing)}")
    columns: dict[str, list[Any]] = {name: [] for name in BLIMP_SCHEMA}
    for path in files:
        for lineno, rec in _read_jsonl(path, _BLIMP_KEYS):
            where = f"{path}:{lineno}"
            if rec["UID"] != path.stem:
                raise ValueError(f"{where}: UID {rec['UID']!r} does not match the file name")
            pair_key = "pairID" if "pairID" in rec else "pair_id"
            if pair_key not in rec:
                raise ValueError(f"{where}: missing key 'pairID' (or 'pair_id')")
            columns["paradigm"].append(rec["UID"])
            columns["linguistics_term"].append(rec["linguistics_term"])
            columns["field"].append(rec["field"])
            columns["pair_id"].append(_as_int(rec[pair_key], f"{where}: {pair_key}"))
            columns["sentence_good"].append(rec["sentence_good"])
            columns["sentence_bad"].append(rec["sentence_bad"])
    return pl.DataFrame(columns, schema=BLIMP_SCHEMA)


class _DataOnlyUnpickler(pickle.Unpickler):
    """Admits only builtin containers and strings: every global (hence every callable) is refused.

    Code execution from a pickle needs a callable on the stack (REDUCE, NEWOBJ, INST, OBJ, BUILD with
    __setstate__), and the only way to get one is find_class (GLOBAL, STACK_GLOBAL, EXT*).
    """

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing global {module}.{name}: only builtin containers and strings")


def _read_tse_pickle(path: Path) -> dict[str, list[tuple[str, ...]]]:
    try:
        with open(path, "rb") as fh:
            obj = _DataOnlyUnpickler(fh).load()
    except Exception as err:  # a corrupted stream can fail in many ways; name the file whichever it is
        raise pickle.UnpicklingError(f"{path}: {err}") from err
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected dict[str, list[tuple[str, ...]]], got {type(obj).__name__}")
    for condition, items in obj.items():
        if not isinstance(condition, str) or not isinstance(items, list):
            raise ValueError(f"{path}: condition {condition!r} is not a str mapping to a list")
        for i, item in enumerate(items):
            if not isinstance(item, tuple) or not all(isinstance(s, str) for s in item):
                raise ValueError(f"{path}: {condition}[{i}] is not a tuple of str: {item!r}")
    return obj


def _tse_task(path: Path) -> tuple[str, str]:
    task = path.stem
    if task not in TSE_FAMILIES:
        raise ValueError(f"{path}: unknown TSE task {task!r} (known: {', '.join(sorted(TSE_FAMILIES))})")
    return task, TSE_FAMILIES[task]


def _tse_items_from_pickle(path: Path) -> Iterator[tuple[str, int, str, str, str | None]]:
    task, family = _tse_task(path)
    arity = 3 if family == NPI_FAMILY else 2
    for condition, items in _read_tse_pickle(path).items():
        for idx, item in enumerate(items):
            if len(item) != arity:
                raise ValueError(f"{path}: {condition}[{idx}] has {len(item)} sentences; {family} items have {arity}")
            # NPI triples are (grammatical, intrusive, ungrammatical): compare first vs last as good vs bad.
            yield condition, idx, item[0], item[-1], item[1] if arity == 3 else None


def _tse_items_from_jsonl(path: Path) -> Iterator[tuple[str, int, str, str, str | None]]:
    task, family = _tse_task(path)
    keys = ("task", "family", "condition", "idx", "sentence_good", "sentence_bad")
    npi = family == NPI_FAMILY
    for lineno, rec in _read_jsonl(path, (*keys, "sentence_intrusive") if npi else keys):
        where = f"{path}:{lineno}"
        if (rec["task"], rec["family"]) != (task, family):
            raise ValueError(f"{where}: task/family {rec['task']}/{rec['family']} != {task}/{family}")
        intrusive = rec["sentence_intrusive"] if npi else rec.get("sentence_intrusive")
        if intrusive is not None and not npi:
            raise ValueError(f"{where}: sentence_intrusive given for non-NPI task {task}")
        idx = _as_int(rec["idx"], f"{where}: idx")
        yield rec["condition"], idx, rec["sentence_good"], rec["sentence_bad"], intrusive


_TSE_READERS = {"pickle": (".pickle", _tse_items_from_pickle), "jsonl": (".jsonl", _tse_items_from_jsonl)}


def load_tse(data_dir: str | os.PathLike, fmt: str = "pickle") -> pl.DataFrame:
    """Marvin & Linzen (2018) TSE items from ``<data_dir>/<task>.pickle`` (upstream) or ``<task>.jsonl``.

    Returns one row per item (tasks sorted by name, conditions and items in file order) with columns task,
    family, condition, idx (Int64, position within the condition), sentence_good, sentence_bad,
    sentence_intrusive (the NPI triple's middle sentence; null for other families).
    """
    if fmt not in _TSE_READERS:
        raise ValueError(f"fmt must be one of {sorted(_TSE_READERS)}, got {fmt!r}")
    suffix, read_items = _TSE_READERS[fmt]
    columns: dict[str, list[Any]] = {name: [] for name in TSE_SCHEMA}
    for path in _data_files(data_dir, suffix):
        task, family = _tse_task(path)
        start = len(columns["idx"])
        for condition, idx, good, bad, intrusive in read_items(path):
            columns["condition"].append(condition)
            columns["idx"].append(idx)
            columns["sentence_good"].append(good)
            columns["sentence_bad"].append(bad)
            columns["sentence_intrusive"].append(intrusive)
        n = len(columns["idx"]) - start
        columns["task"].extend([task] * n)
        columns["family"].extend([family] * n)
    return pl.DataFrame(columns, schema=TSE_SCHEMA)


def load_wikitext(path: str | os.PathLike) -> str:
    """The WikiText-2 text as the authors feed it: ``"\\n\\n".join(rows)`` over the hub rows of ``path``.

    Rows follow the hub ``wikitext`` builder: one per line of the raw file (text mode, so universal newlines),
    the line itself with its trailing newline if it has non-whitespace content, else the empty string.
    """
    with open(path, encoding="utf-8") as fh:
        rows = [line if line.strip() else "" for line in fh]
    return "\n\n".join(rows)


def wikitext_split(data_dir: str | os.PathLike, split: str) -> str:
    """The text of one split (``"test"`` or ``"valid"``) of a verified WikiText-2 directory."""
    names = {"test": WIKITEXT_TEST, "valid": WIKITEXT_VALID}
    if split not in names:
        raise ValueError(f"WikiText-2 split {split!r}: expected one of {sorted(names)}")
    return load_wikitext(Path(data_dir) / names[split])


def _non_negative_int(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | np.integer) and value >= 0


def subsample_per_group(frame: pl.DataFrame, by: str, n: int | None, seed: int, offset: int = 0) -> pl.DataFrame:
    """At most ``n`` rows of each ``by`` group, uniformly without replacement, in the frame's original order.

    The draw gives every row a uniform key from ``numpy.random.default_rng(seed)`` (PCG64: identical on every
    machine) and keeps, per group, the rows whose key ranks ``offset + 1`` to ``offset + n`` (``n=None``: every
    rank above ``offset``), so the result depends only on the frame, ``n``, ``seed`` and ``offset``. Groups with
    fewer rows give what they have; ``n=None`` with ``offset=0`` returns ``frame`` unchanged. Why an offset: with
    the same seed, a draw at offset k shares no row with any draw of at most k per group, so a confirmatory run
    scores items its sizing run never saw (a draw with another seed would overlap it at random).
    """
    if not (n is None or _non_negative_int(n)):
        raise ValueError(f"subsample_per_group: n must be a non-negative int or None, got {n!r}")
    if not _non_negative_int(offset):
        raise ValueError(f"subsample_per_group: offset must be a non-negative int, got {offset!r}")
    if n is None and offset == 0:
        return frame
    if by not in frame.columns:
        raise ValueError(f"subsample_per_group: no column {by!r} (columns: {frame.columns})")
    key = "_subsample_key"
    while key in frame.columns:  # a temporary column must not shadow a real one
        key += "_"
    keys = pl.Series(key, np.random.default_rng(seed).random(frame.height))
    rank = pl.col(key).rank("ordinal").over(by)
    window = (rank > offset) if n is None else (rank > offset) & (rank <= offset + n)
    keep = frame.with_columns(keys).select(window).to_series()
    return frame.filter(keep)


# Items per group of the pinned public data (PUBLIC_SOURCES), counted with load_blimp / load_tse on those files
# (2026-12-05): what a config's offsets are checked against before the data is fetched.
PINNED_PAIRS_PER_PARADIGM = 1000
PINNED_TSE_ITEMS = {
    "long_vp_coord": 400, "npi_across_anim": 4800, "npi_across_inanim": 5760, "obj_rel_across_anim": 11200,
    "obj_rel_across_inanim": 11200, "obj_rel_no_comp_across_anim": 11200, "obj_rel_no_comp_across_inanim": 11200,
    "obj_rel_no_comp_within_anim": 11200, "obj_rel_no_comp_within_inanim": 11200, "obj_rel_within_anim": 11200,
    "obj_rel_within_inanim": 11200, "prep_anim": 16800, "prep_inanim": 5600, "reflexive_sent_comp": 3360,
    "reflexives_across": 22400, "sent_comp": 1680, "simple_agrmt": 140, "simple_npi_anim": 120,
    "simple_npi_inanim": 144, "simple_reflexives": 280, "subj_rel": 11200, "vp_coord": 840,
}  # fmt: skip


def items_per_group(dataset: str, spec: dict, workdir: str | os.PathLike = ".") -> dict[str, int] | None:
    """Items per group of ``dataset`` as the config's ``data.<dataset>`` entry ``spec`` gives it ("blimp": pairs per
    paradigm, "tse": items per subtask): counted in its ``local_dir`` where that holds the data files, else the pinned
    public data's when ``spec`` names that source, else None (known only once fetched)."""
    local = Path(workdir) / spec["local_dir"] if spec.get("local_dir") else None
    suffix = ".jsonl" if dataset == "blimp" else _TSE_READERS[spec.get("format", "pickle")][0]
    if local is not None and local.is_dir() and any(local.glob(f"*{suffix}")):
        frame = load_blimp(local) if dataset == "blimp" else load_tse(local, spec.get("format", "pickle"))
        return dict(frame.group_by("paradigm" if dataset == "blimp" else "task").len().iter_rows())
    stem = Path(spec["checksums"]).stem
    if stem not in PUBLIC_SOURCES or spec.get("url") != PUBLIC_SOURCES[stem]["url"]:
        return None
    if dataset == "blimp":
        return dict.fromkeys(
            (Path(name).stem for name in read_checksums(Path(workdir) / spec["checksums"])), PINNED_PAIRS_PER_PARADIGM
        )
    return dict(PINNED_TSE_ITEMS) if stem == "tse-pickle" else None
