"""How long a perplexity window may be: read from the blocks' has_length_limit, config sniffing for foreign models."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from hf_llmsys import LlmsysLlamaConfig, LlmsysLlamaForCausalLM
from hf_llmsys.evaluation import corpus_perplexity
from hf_llmsys.evaluation.model_limits import declared_length_limit, has_length_limit, resolve_max_length
from hf_llmsys.models.config_kinds import SCORE_BIAS
from hf_llmsys.models.positional_encodings import POSITIONAL_ENCODINGS, PositionalEncoding

TEXT = "w1 w2 w3 w4 w5 w6 w7 w8 w9 w1 w2 w3 w4 w5 w6 w7 w8 w9 w1 w2"


class _TestOnlyEncoding(nn.Module):
    """A positional encoding no list in evaluation/ has ever heard of; it only declares its capability."""

    has_length_limit = False


class _TestOnlyTable(nn.Module):
    has_length_limit = True


class _UniformLM(nn.Module):
    """Zero logits; a config with a trained context of 8 and an encoding name no sniffing list knows."""

    def __init__(self, encoding: nn.Module | None, kind: str = "brand_new_encoding"):
        super().__init__()
        self.config = SimpleNamespace(max_position_embeddings=8, position_embedding_type=kind)
        self.positions = encoding

    def forward(self, input_ids, attention_mask=None):
        return torch.zeros(*input_ids.shape, 16)


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<s>": 0, "<pad>": 1, "<unk>": 2} | {f"w{i}": i + 2 for i in range(1, 10)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", pad_token="<pad>", unk_token="<unk>")


def test_a_new_encoding_is_learned_from_its_declared_capability(tokenizer):
    relative = _UniformLM(_TestOnlyEncoding())
    with pytest.warns(UserWarning, match=r"exceeds the model's trained context \(config.max_position_embeddings=8\)"):
        assert corpus_perplexity(relative, tokenizer, TEXT, max_length=16).tokens == 20
    with pytest.raises(ValueError, match=r"learned position table \(config.max_position_embeddings=8\)"):
        corpus_perplexity(_UniformLM(_TestOnlyTable()), tokenizer, TEXT, max_length=16)
    assert corpus_perplexity(_UniformLM(_TestOnlyTable()), tokenizer, TEXT, max_length=8).tokens == 20


def test_undeclared_models_fall_back_to_config_sniffing():
    assert declared_length_limit(_UniformLM(None)) is None
    assert has_length_limit(_UniformLM(None))  # an unknown name with no declaration: assume a table
    assert not has_length_limit(_UniformLM(None, kind="rope"))
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=16, n_positions=8, n_embd=8, n_layer=1, n_head=2))
    llama = LlamaForCausalLM(
        LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2)
    )
    assert (declared_length_limit(gpt2), declared_length_limit(llama)) == (None, None)
    assert has_length_limit(gpt2) and not has_length_limit(llama)


@pytest.mark.parametrize("kind", sorted(set(POSITIONAL_ENCODINGS) - {"t5"}))  # t5 bias: encoder-decoder only
def test_our_models_answer_through_their_encoding_class(kind):
    config = LlmsysLlamaConfig(
        vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        max_position_embeddings=8, position_embedding_type=kind,
    )  # fmt: skip
    model = LlmsysLlamaForCausalLM(config)
    declared = POSITIONAL_ENCODINGS[kind].has_length_limit
    assert declared_length_limit(model) is declared
    if declared:
        with pytest.raises(ValueError, match="learned position table"):
            resolve_max_length(model, None, 16)
    else:
        with pytest.warns(UserWarning, match="trained context"):
            assert resolve_max_length(model, None, 16) == 16


class _RegisteredTestEncoding(PositionalEncoding):
    """One class plus one registry row: NoPE-like, declares no length limit."""

    has_length_limit = False

    def __init__(self, config):
        super().__init__()


def test_a_registered_encoding_reaches_corpus_perplexity_without_changes_here(tokenizer, monkeypatch):
    monkeypatch.setitem(POSITIONAL_ENCODINGS, "test_only", _RegisteredTestEncoding)
    monkeypatch.setitem(SCORE_BIAS, "test_only", False)  # what the config knows of a new encoding (config_kinds.py)
    config = LlmsysLlamaConfig(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        max_position_embeddings=8, position_embedding_type="test_only",
    )  # fmt: skip
    model = LlmsysLlamaForCausalLM(config).eval()
    assert declared_length_limit(model) is False
    with pytest.warns(UserWarning, match="trained context"):
        assert corpus_perplexity(model, tokenizer, TEXT, max_length=16).tokens == 20
    monkeypatch.setattr(_RegisteredTestEncoding, "has_length_limit", True)
    with pytest.raises(ValueError, match="learned position table"):
        corpus_perplexity(model, tokenizer, TEXT, max_length=16)
