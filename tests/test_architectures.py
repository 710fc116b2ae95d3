"""The architecture registry (hf_llmsys/architectures.py): every row complete, its Auto classes resolving through
transformers, unknown types named, a fourth row picked up everywhere without other edits, and no other module keeping
a table of our model-type names."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoConfig, PreTrainedConfig, PreTrainedModel

import hf_llmsys
from hf_llmsys import architectures
from hf_llmsys.architectures import ARCHITECTURES, Architecture, UnknownArchitectureError, architecture

PACKAGE = Path(hf_llmsys.__file__).resolve().parent
OURS = ("llmsys_llama", "llmsys_gpt3", "llmsys_t5")


def test_the_three_architectures_are_registered_in_order():
    assert list(ARCHITECTURES) == list(OURS) == architectures.model_types()
    assert all(architecture(name).model_type == name for name in OURS)


@pytest.mark.parametrize("model_type", OURS)
def test_every_row_has_every_field(model_type):
    row = architecture(model_type)
    may_be_empty = {"training_flag_defaults", "load_mismatch_hint", "tensor_parallel_refusal"} | (
        {"train_config"} if row.is_encoder_decoder else set()
    )
    for field in dataclasses.fields(Architecture):
        value = getattr(row, field.name)
        assert field.name in may_be_empty or (value is not None and len(value) if hasattr(value, "__len__") else value)
    assert row.train_config is None or not row.is_encoder_decoder  # T5's job builds its own config
    assert row.config_class.model_type == model_type
    assert row.family in architectures.FAMILIES
    assert row.is_encoder_decoder == row.config_class().is_encoder_decoder
    assert all(isinstance(name, str) and name.endswith("proj") for name in row.lora_targets)
    for name in ("describe", "train_job") + (() if row.train_config is None else ("train_config",)):
        assert callable(row.entry(name)), (model_type, name)


@pytest.mark.parametrize("model_type", OURS)
def test_auto_classes_resolve_through_transformers(model_type):
    row = architecture(model_type)
    config = AutoConfig.for_model(model_type)
    assert type(config) is row.config_class
    for auto_class, model_class in row.auto_classes.items():
        assert auto_class._model_mapping[row.config_class] is model_class, (model_type, auto_class.__name__)
        assert model_class.config_class is row.config_class
        assert model_class._auto_class == auto_class.__name__  # registered for remote code


@pytest.mark.parametrize("model_type", OURS)
def test_training_flags_are_flags_with_a_scope(model_type):
    from hf_llmsys.training.pretrain_arguments import FLAG_SCOPES, DataArguments, ModelArguments

    row = architecture(model_type)
    names = {f.name for cls in (ModelArguments, DataArguments) for f in dataclasses.fields(cls)}
    assert row.training_flags <= set(FLAG_SCOPES), model_type
    assert set(row.training_flag_defaults) <= names, model_type


def test_every_scoped_flag_applies_to_some_architecture():
    from hf_llmsys.training.pretrain_arguments import FLAG_SCOPES

    assert {name: scope.model_types for name, scope in FLAG_SCOPES.items() if scope.model_types == ()} == {}
    assert FLAG_SCOPES["attention_layout"].model_types == ("llmsys_llama", "llmsys_gpt3")
    assert FLAG_SCOPES["noise_density"].model_types == ("llmsys_t5",)
    assert FLAG_SCOPES["intermediate_size"].model_types is None  # every type; GPT-3's own default None (4d)
    assert architecture("llmsys_gpt3").training_flag_defaults == {"intermediate_size": None}


def test_an_unknown_type_names_the_field_and_the_known_types():
    with pytest.raises(ValueError, match=r"model_type 'nope' is unknown") as info:
        architecture("nope")
    assert isinstance(info.value, UnknownArchitectureError)
    assert all(name in str(info.value) for name in OURS)
    with pytest.raises(UnknownArchitectureError, match=r"^--model_type 'nope' is unknown.*llmsys_t5"):
        architecture("nope", "--model_type")


def test_entries_are_imported_lazily():
    """Importing the registry imports neither the training code nor the card code (a fresh interpreter)."""
    code = (
        "import sys, hf_llmsys.architectures as a; "
        "print(sorted(m for m in sys.modules if m.startswith(('hf_llmsys.training', 'hf_llmsys.hub'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert done.stdout.strip() == "[]"


# A fourth architecture: its config and model classes, then one row, and nothing else.
class DummyConfig(PreTrainedConfig):
    model_type = "llmsys_dummy"

    def __init__(self, hidden_size: int = 8, **kwargs):
        self.hidden_size = hidden_size
        super().__init__(**kwargs)


class DummyModel(PreTrainedModel):
    config_class = DummyConfig

    def __init__(self, config):
        super().__init__(config)
        self.q_proj = torch.nn.Linear(config.hidden_size, config.hidden_size)
        self.w_out = torch.nn.Linear(config.hidden_size, config.hidden_size)
        self.post_init()


def dummy_card(config):
    from hf_llmsys.hub.architecture import Architecture as Card

    return Card("dummy", config.model_type, 7, [("parameters", "7")], "text-generation", "AutoModel")


def dummy_job(model_args, data_args, training_args):
    return {"trained": model_args.model_type, "intermediate_size": model_args.intermediate_size}


@pytest.fixture
def dummy_row(monkeypatch):
    """The registry with a fourth row (transformers' Auto mappings restored afterwards)."""
    from transformers import AutoModel
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    monkeypatch.setattr(CONFIG_MAPPING, "_extra_content", dict(CONFIG_MAPPING._extra_content))
    monkeypatch.setattr(AutoModel._model_mapping, "_extra_content", dict(AutoModel._model_mapping._extra_content))
    row = Architecture(
        model_type="llmsys_dummy",
        config_class=DummyConfig,
        auto_classes={AutoModel: DummyModel},
        family="decoder",
        describe=dummy_card,
        train_job=dummy_job,
        train_config=None,
        lora_targets=("q_proj", "k_proj"),
        training_flags=frozenset({"num_key_value_heads", "num_decoder_layers"}),
        training_flag_defaults={"intermediate_size": 77},
    )
    monkeypatch.setitem(ARCHITECTURES, "llmsys_dummy", row)
    return row


def test_a_fourth_row_is_picked_up_everywhere(dummy_row, tmp_path):
    from transformers import AutoModel

    from hf_llmsys.cli.train import parse_args
    from hf_llmsys.hub.architecture import describe
    from hf_llmsys.registration import register_all
    from hf_llmsys.training import train
    from hf_llmsys.training.lora import resolve_targets
    from hf_llmsys.training.pretrain_arguments import FLAG_SCOPES, DataArguments, ModelArguments

    # Auto classes
    register_all()
    assert type(AutoConfig.for_model("llmsys_dummy")) is DummyConfig
    assert type(AutoModel.from_config(DummyConfig())) is DummyModel

    # training flag scoping: the types each flag applies to, and the type's own defaults
    assert FLAG_SCOPES["num_decoder_layers"].model_types == ("llmsys_t5", "llmsys_dummy")
    assert FLAG_SCOPES["sliding_window"].model_types == ("llmsys_llama", "llmsys_gpt3")
    training_args = train.LlmsysTrainingArguments(output_dir=str(tmp_path / "out"), report_to="none")
    model_args = ModelArguments(model_type="llmsys_dummy", num_decoder_layers=3)
    train.validate_pretrain_args(model_args, training_args, DataArguments())
    assert model_args.intermediate_size == 77  # the row's default, not the flag's 384
    with pytest.raises(ValueError, match=r"--sliding_window does not apply to --model_type llmsys_dummy"):
        train.validate_pretrain_args(ModelArguments(model_type="llmsys_dummy", sliding_window=4), training_args)
    with pytest.raises(ValueError, match=r"--num_decoder_layers does not apply .*only to llmsys_t5, llmsys_dummy"):
        train.validate_pretrain_args(ModelArguments(num_decoder_layers=3), training_args)

    # `llmsys train --model_type llmsys_dummy` runs the row's job
    args = parse_args(["--model_type", "llmsys_dummy", "--output_dir", str(tmp_path / "run")])
    assert train.run_training(*args, given=frozenset({"model_type", "output_dir"})) == {
        "trained": "llmsys_dummy",
        "intermediate_size": 77,
    }

    # LoRA defaults: the row's targets the model has
    assert resolve_targets(DummyModel(DummyConfig()), None) == ["q_proj"]

    # model card
    card = describe(DummyConfig())
    assert (card.name, card.model_type) == ("dummy", "llmsys_dummy")


def test_without_the_row_nothing_knows_the_type():
    from hf_llmsys.hub.architecture import describe
    from hf_llmsys.training.lora import resolve_targets

    model = SimpleNamespace(config=SimpleNamespace(model_type="llmsys_dummy"), named_modules=lambda: iter(()))
    assert resolve_targets(model, None) == "all-linear"
    with pytest.raises(UnknownArchitectureError, match="llmsys_dummy"):
        describe(SimpleNamespace(model_type="llmsys_dummy"))


# `"llmsys_llama": ...` (a dict key) or `== "llmsys_gpt3"` / `!= 'llmsys_t5'` (a comparison) in code; in a docstring,
# a comment or help text the names are fine.
TYPE_NAME_TABLE = re.compile(r"""["']llmsys_(llama|gpt3|t5)["']\s*:|[!=]=\s*["']llmsys_(llama|gpt3|t5)["']""")


def code_lines(path: Path):
    """(line number, line) of `path` outside docstrings and comments."""
    import ast
    import io
    import tokenize

    source = path.read_text()
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.update(range(value.lineno, value.end_lineno + 1))
    comments = {tok.start[0]: tok.start[1] for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                if tok.type == tokenize.COMMENT}  # fmt: skip
    for number, line in enumerate(source.splitlines(), 1):
        if number not in docstrings:
            yield number, line[: comments[number]] if number in comments else line


def test_no_other_module_keeps_a_table_of_our_type_names():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "architectures.py" and PACKAGE / "models" not in path.parents
        for number, line in code_lines(path)
        if TYPE_NAME_TABLE.search(line)
    ]
    assert not found, "model-type names keyed or compared outside the registry:\n" + "\n".join(found)


def test_the_scan_sees_keys_and_comparisons():
    assert TYPE_NAME_TABLE.search('TABLE = {"llmsys_t5": run}')
    assert TYPE_NAME_TABLE.search("if model_type == 'llmsys_gpt3':")
    assert not TYPE_NAME_TABLE.search('help="llmsys_llama or llmsys_gpt3 (causal LMs)"')
    assert not TYPE_NAME_TABLE.search('default="llmsys_llama",')
