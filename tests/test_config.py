"""Config validation: defaults filled, and every malformed config stopped with one line naming the key."""

import copy
from pathlib import Path

import pytest
import yaml

from wneurons.experiment.config import ConfigError, load_yaml_strict, validate_config
from wneurons.lm.scoring import CONVENTIONS
from wneurons.store.data import PUBLIC_SOURCES

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow/schemas/config.schema.yaml"


def demo_config() -> dict:
    return yaml.safe_load((ROOT / "config/demo.yaml").read_text())


def full_config() -> dict:
    return yaml.safe_load((ROOT / "config/config.yaml").read_text())


def with_local_data(cfg: dict, tmp_path: Path) -> dict:
    """Point data dirs at empty local folders so the check does not depend on ../shared."""
    for name in cfg["data"]:
        d = tmp_path / name
        d.mkdir(exist_ok=True)
        cfg["data"][name]["local_dir"] = str(d)
    return cfg


@pytest.mark.parametrize("name", ["demo", "full"])
def test_shipped_configs_validate_and_get_defaults(name, tmp_path):
    cfg = with_local_data(demo_config() if name == "demo" else full_config(), tmp_path)
    out = validate_config(cfg, SCHEMA, ROOT)
    model = next(iter(out["models"].values()))
    assert "final_revision" in model and "ablate" in model
    assert out["ablation"]["layer_groups"]["size"] >= 1
    assert out["evaluation"]["convention"] in CONVENTIONS
    # The data sources come from the one pin (wneurons.store.data.PUBLIC_SOURCES), not from the config files.
    assert out["data"]["blimp"]["url"] == PUBLIC_SOURCES["blimp"]["url"]
    assert out["data"]["wikitext2"]["archive_sha256"] == PUBLIC_SOURCES["wikitext-2"]["archive_sha256"]
    assert out["data"]["tse"]["url"] == PUBLIC_SOURCES["tse-pickle"]["url"]


def test_family_is_optional_and_text_only_model_types_are_accepted(tmp_path):
    cfg = with_local_data(demo_config(), tmp_path)
    del cfg["models"]["smollm2-135m"]["family"]
    assert validate_config(cfg, SCHEMA, ROOT)["models"]["smollm2-135m"]["family"] is None
    # The schema takes text-only model types; SmolLM2's own GGUF header says llama, so gemma3_text is caught here.
    cfg["models"]["smollm2-135m"]["family"] = "gemma3_text"
    with pytest.raises(ConfigError, match=r"models\.smollm2-135m\.family: 'gemma3_text' but the model's model_type"):
        validate_config(cfg, SCHEMA, ROOT)


def test_a_plain_gguf_file_is_a_model_source(tmp_path):
    from wneurons.experiment.model_facts import gguf_wheel_file

    cfg = with_local_data(demo_config(), tmp_path)
    spec = cfg["models"]["smollm2-135m"]
    wheel = spec.pop("gguf_wheel")
    spec["gguf_file"] = str(tmp_path / "model.gguf")
    with pytest.raises(ConfigError, match=r"models\.smollm2-135m\.gguf_file: no such path"):
        validate_config(copy.deepcopy(cfg), SCHEMA, ROOT)
    (tmp_path / "model.gguf").write_bytes(b"GGUF")  # not a GGUF header: its layers cannot be read
    with pytest.raises(ConfigError, match=r"models\.smollm2-135m\.gguf_file: cannot read the model's config"):
        validate_config(copy.deepcopy(cfg), SCHEMA, ROOT)
    (tmp_path / "model.gguf").unlink()
    (tmp_path / "model.gguf").symlink_to(gguf_wheel_file(wheel["wheel"], wheel["file"]))
    validate_config(copy.deepcopy(cfg), SCHEMA, ROOT)
    spec["num_layers"] = 24  # the header says 30
    with pytest.raises(ConfigError, match=r"models\.smollm2-135m\.num_layers: 24 but the model has 30 layers"):
        validate_config(cfg, SCHEMA, ROOT)


def _set(cfg, path, value):
    node = cfg
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value


_DELETE = object()
M = ("models", "smollm2-135m")

BAD = [
    # (path, value, text the one-line error must contain)
    ((*M, "num_layers"), "thirty", "num_layers"),
    ((*M, "num_layers"), 0, "num_layers"),
    ((*M, "family"), "bert", "family"),
    ((*M, "params_b"), -1, "params_b"),
    ((*M, "hub_id"), "org/model", "exactly one of hub_id, local_path, gguf_wheel, gguf_file"),
    ((*M, "gguf_wheel"), _DELETE, "exactly one of hub_id"),
    ((*M, "gguf_file"), "model.gguf", "exactly one of hub_id"),
    ((*M, "window_bos"), "yes", "window_bos"),
    ((*M, "checkpoints"), ["step1", "step1"], "checkpoints"),
    ((*M, "checkpoints"), ["main"], "repeats final_revision"),
    ((*M, "colour"), "blue", "unknown key"),
    (("models",), {}, "models"),
    (("ablation", "percents"), [150], "ablation.percents"),
    (("ablation", "percents"), [0], "ablation.percents"),
    (("ablation", "percents"), [], "ablation.percents"),
    (("ablation", "fractions"), [1], "unknown key under ablation"),  # renamed: percents
    (("ablation", "matched", "search_tokens"), 4096, "unknown key under ablation.matched"),  # the ppl stream now
    (("ablation", "count_rule"), "floor", "ablation.count_rule"),
    (("ablation", "checkpoint_selection"), "first", "ablation.checkpoint_selection"),
    (("ablation", "layer_groups", "size"), [0], "ablation.layer_groups.size"),
    (("ablation", "single_layers"), {"models": ["gpt-9"]}, "ablation.single_layers.models"),
    (("ablation", "single_layers"), {"models": ["smollm2-135m"], "layers": [30]}, "single_layers.layers: layer 30"),
    (("neurons", "layers"), {"checkpoints": [30]}, "neurons.layers.checkpoints: layer 30"),
    (("neurons", "layers"), {"final": [1]}, "neurons.layers.final: smollm2-135m is ablated"),
    ((*M, "neuron_layers"), {"final": [5]}, "neurons.layers.final: smollm2-135m is ablated"),
    ((*M, "neuron_layers"), {"final": [30]}, "models.smollm2-135m.neuron_layers.final: layer 30"),
    (("ablation", "random_trials"), 0, "random_trials"),
    (("ablation", "matched", "nll_increase_tolerance"), 0, "nll_increase_tolerance"),
    (("ablation", "mode"), "sideways", "mode"),
    (("evaluation", "convention"), "mine", "convention"),
    (("evaluation", "batch_size"), 2.5, "batch_size"),
    (("evaluation", "blimp_pairs_offset"), -1, "blimp_pairs_offset"),
    (("evaluation", "tse_items_offset"), "10", "tse_items_offset"),
    (("neurons", "wd_method"), "approx", "wd_method"),
    (("neurons", "md_pairs"), 5000, "md_pairs"),
    (("data", "blimp", "checksums"), "resources/checksums/missing.sha256", "data.blimp.checksums"),
    (("data", "tse", "format"), "csv", "format"),
    (("data", "wikitext2", "archive_sha256"), "abc", "archive_sha256"),
    (("figures", "figure1", "model"), "gpt-9", "figures.figure1.model"),
    (("figures", "figure1", "layer"), 99, "figures.figure1.layer"),
    # Keys that name a model name a configured one (issue 21: pos.model was a KeyError in an input function).
    (("pos", "model"), "gpt-9", "pos.model: 'gpt-9' is not a configured model"),
    (("figures", "figure5", "model"), "gpt-9", "figures.figure5.model: 'gpt-9' is not a configured model"),
    (("figures", "figure6", "model"), "gpt-9", "figures.figure6.model"),
    (("figures", "figure7", "model"), "gpt-9", "figures.figure7.model"),
    (("training", "pair_models"), ["gpt-9"], "training.pair_models: 'gpt-9'"),
    (("report", "explorer", "models"), ["gpt-9"], "report.explorer.models: 'gpt-9'"),
    # A model with checkpoints is followed through training: every revision, the final one too, is step<N>.
    ((*M, "checkpoints"), ["step1"], "models.smollm2-135m.final_revision: revision 'main' is not named step<N>"),
    # Figure 5's layer from num_layers, its neuron from d_ff (without d_ff the case-study job checks the width).
    (("figures", "figure5", "layer"), 30, "figures.figure5.layer: 30 but smollm2-135m has layers 0..29"),
    (("figures", "figure5", "neuron"), 99999, "figures.figure5.neuron: 99999 but layer 1 of smollm2-135m has 1536"),
    (("models", "Bad Name"), {"family": "llama", "hub_id": "a/b", "num_layers": 2, "params_b": 1}, "models"),
    (("threads",), 4, "unknown key"),
]


@pytest.mark.parametrize(("path", "value", "expected"), BAD, ids=[".".join(map(str, b[0])) for b in BAD])
def test_malformed_config_gives_one_line_naming_the_key(path, value, expected, tmp_path):
    cfg = with_local_data(demo_config(), tmp_path)
    _set(cfg, path, value if value is _DELETE else copy.deepcopy(value))
    with pytest.raises(ConfigError) as err:
        validate_config(cfg, SCHEMA, ROOT)
    message = str(err.value)
    assert "\n" not in message
    assert expected in message


def test_missing_data_without_url_is_an_error(tmp_path):
    cfg = with_local_data(demo_config(), tmp_path)
    # The derived TSE jsonl files have no public source to pin, so url: null leaves nothing to download.
    cfg["data"]["tse"] |= {"local_dir": str(tmp_path / "nowhere"), "url": None, "format": "jsonl"}
    cfg["data"]["tse"]["checksums"] = "resources/checksums/tse-jsonl.sha256"
    with pytest.raises(ConfigError, match=r"data\.tse: local_dir .* does not exist"):
        validate_config(cfg, SCHEMA, ROOT)


def test_duplicate_model_names_are_refused(tmp_path):
    text = (ROOT / "config/demo.yaml").read_text()
    block = text[text.index("  smollm2-135m:") : text.index("\ndata:")]
    dup = tmp_path / "dup.yaml"
    dup.write_text(text.replace(block, block + "\n" + block, 1))
    with pytest.raises(ConfigError, match=r"duplicate key 'smollm2-135m' at .*dup.yaml:\d+"):
        load_yaml_strict(dup)


def test_two_names_for_one_model_are_refused_naming_both(tmp_path):
    """The same wheel's GGUF under a second name (the demo's SmolLM2), and the same hub repository at the same final
    revision (the paper grid's first model): every job would run twice."""
    cfg = with_local_data(demo_config(), tmp_path)
    cfg["models"]["smollm2-again"] = dict(cfg["models"]["smollm2-135m"])
    with pytest.raises(ConfigError) as err:
        validate_config(cfg, SCHEMA, ROOT)
    assert str(err.value).startswith("config: models.smollm2-again.gguf_wheel: the same model as models.smollm2-135m")
    cfg = with_local_data(full_config(), tmp_path)
    first = next(iter(cfg["models"]))
    cfg["models"]["again"] = dict(cfg["models"][first])
    with pytest.raises(ConfigError) as err:
        validate_config(cfg, SCHEMA, ROOT)
    assert str(err.value).startswith(f"config: models.again.hub_id: the same model as models.{first}")
    assert "\n" not in str(err.value)


def write_gguf_header(path, architecture: str, **counts: int) -> None:
    """A GGUF file of metadata only (no tensors): general.architecture and ``{architecture}.{key}`` as uint32."""
    import struct

    def string(text: str) -> bytes:
        return struct.pack("<Q", len(text.encode())) + text.encode()

    kv = string("general.architecture") + struct.pack("<I", 8) + string(architecture)
    kv += b"".join(string(f"{architecture}.{k}") + struct.pack("<II", 4, v) for k, v in counts.items())
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1 + len(counts)) + kv)


def test_restricted_layers_refused_where_a_job_reads_other_layers(tmp_path):
    cfg = with_local_data(demo_config(), tmp_path)
    cfg["ablation"]["layer_groups"]["size"] = 2  # with SmolLM2 not ablated, groups of 4 would span neox-mini's 3 layers
    cfg["ablation"]["single_layers"]["models"] = []  # the demo's single-layer ablations need ablate: true
    model = cfg["models"]["smollm2-135m"]
    model |= {"ablate": False, "neuron_layers": {"final": [2]}}
    cfg["ablation"]["single_layers"]["models"] = []  # the demo ablates single layers of its model (Fig. 7)
    with pytest.raises(ConfigError, match=r"figures.figure1.layer: layer 1 of smollm2-135m is not collected"):
        validate_config(copy.deepcopy(cfg), SCHEMA, ROOT)
    model["neuron_layers"]["final"] = [1]
    validate_config(copy.deepcopy(cfg), SCHEMA, ROOT)  # figures 1 and 2a read layer 1 only
    model |= {"ablate": True, "checkpoints": ["step1"], "checkpoint_ablations": True, "neuron_layers": {}}
    model["final_revision"] = "step2"  # training dynamics order the revisions by step
    cfg["neurons"]["layers"] = {"checkpoints": [1]}
    validate_config(copy.deepcopy(cfg), SCHEMA, ROOT)  # checkpoints ablate the final revision's cohort
    cfg["ablation"]["checkpoint_selection"] = "own"
    with pytest.raises(ConfigError, match=r"neurons.layers.checkpoints: smollm2-135m .* checkpoint_selection: own"):
        validate_config(cfg, SCHEMA, ROOT)


def test_matched_search_gets_an_nll_increase_tolerance(tmp_path):
    # The perplexity gap alone let the demo's control stop at 72% of W's NLL increase: the default asks for 90-110%.
    cfg = with_local_data(demo_config(), tmp_path)
    del cfg["ablation"]["matched"]["nll_increase_tolerance"]
    assert validate_config(cfg, SCHEMA, ROOT)["ablation"]["matched"]["nll_increase_tolerance"] == 0.1
    cfg["ablation"]["matched"]["nll_increase_tolerance"] = None  # the perplexity tolerance alone, as before
    assert validate_config(cfg, SCHEMA, ROOT)["ablation"]["matched"]["nll_increase_tolerance"] is None


def test_figure5_neuron_is_checked_where_the_config_states_the_width(tmp_path):
    cfg = with_local_data(demo_config(), tmp_path)
    cfg["figures"]["figure5"]["neuron"] = 1535
    validate_config(copy.deepcopy(cfg), SCHEMA, ROOT)  # the last neuron of a 1,536-wide layer
    del cfg["models"]["smollm2-135m"]["d_ff"]
    cfg["figures"]["figure5"]["neuron"] = 99999
    validate_config(cfg, SCHEMA, ROOT)  # the width is known from the model only: the case-study job checks it


def test_the_gemma3_replication_config_validates(tmp_path):
    cfg = with_local_data(yaml.safe_load((ROOT / "config/replication-gemma3.yaml").read_text()), tmp_path)
    gguf = tmp_path / "gemma.gguf"  # written by `make gemma3`; the check reads only its header
    write_gguf_header(gguf, "gemma3", block_count=18, feed_forward_length=2048)
    cfg["models"]["gemma3-270m"]["gguf_file"] = str(gguf)
    out = validate_config(cfg, SCHEMA, ROOT)
    assert out["models"]["gemma3-270m"]["family"] == "gemma3_text"
    assert out["models"]["gemma3-270m"]["window_bos"] is None  # the family's default: a BOS per window


# Offsets against the data's sizes (the pinned source's: with_local_data leaves the local folders empty).
OFFSETS = [
    ("blimp_pairs_offset", 1000, "blimp_pairs_offset: 1000 is beyond the data: blimp paradigm"),
    ("blimp_pairs_offset", 995, "blimp_pairs_offset: 995 leaves 5 of the 1000 pairs of blimp paradigm"),
    ("tse_items_offset", 120, "tse_items_offset: 120 is beyond the data: tse subtask simple_npi_anim has 120 items"),
    ("tse_items_offset", 110, "leaves 10 of the 120 items of tse subtask simple_npi_anim, fewer than evaluation.tse_"),
    ("blimp_pairs_offset", 994, None),  # the demo asks 6 per paradigm: 994 + 6 = 1000
    ("tse_items_offset", 108, None),  # and 12 per subtask: 108 + 12 = 120
]


@pytest.mark.parametrize(("key", "offset", "expected"), OFFSETS, ids=[f"{k}={o}" for k, o, _ in OFFSETS])
def test_an_offset_beyond_the_data_or_leaving_fewer_items_is_one_line(key, offset, expected, tmp_path):
    cfg = with_local_data(demo_config(), tmp_path)
    cfg["evaluation"][key] = offset
    if expected is None:
        validate_config(cfg, SCHEMA, ROOT)
        return
    with pytest.raises(ConfigError) as err:
        validate_config(cfg, SCHEMA, ROOT)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_offsets_are_checked_against_the_local_data_and_take_the_rest_without_a_size(tmp_path):
    import json

    cfg = with_local_data(demo_config(), tmp_path)
    for paradigm, n in (("a_small", 3), ("b_large", 8)):
        rows = [
            {
                "UID": paradigm,
                "linguistics_term": "t",
                "field": "f",
                "pairID": i,
                "sentence_good": "a",
                "sentence_bad": "b",
            }
            for i in range(n)
        ]
        (tmp_path / "blimp" / f"{paradigm}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg["evaluation"]["blimp_pairs_offset"] = 3
    with pytest.raises(
        ConfigError, match=r"3 is beyond the data: blimp paradigm a_small has 3 pairs \(its 2 paradigms"
    ):
        validate_config(copy.deepcopy(cfg), SCHEMA, ROOT)
    cfg["evaluation"] |= {"blimp_pairs_offset": 2, "blimp_pairs_per_paradigm": None}  # the rest of each, on purpose
    validate_config(cfg, SCHEMA, ROOT)
