"""The permutation example of tab 1: "床前明月" vs "前床明月" through a NoPE and a RoPE model, live.

Attention without positions is permutation-equivariant: with one layer, the last position's output (and so the
next-token distribution) is the same for any order of the earlier tokens. Stacked *causal* layers break that
exactly-equal result (an earlier token's hidden state depends on which tokens precede it), so the example runs
each model twice: its first layer only (exact invariance for NoPE) and all its layers. RoPE changes the distribution
in both cases. With a zoo loaded the models are the zoo's trained ``none`` and ``rope`` runs, else untrained
one-layer models built on the spot (the identity is structural, training does not matter).
"""

from __future__ import annotations

import copy
import functools

import pandas as pd
import torch

from ..models.configuration_llmsys_llama import LlmsysLlamaConfig
from ..models.modeling_llmsys_llama import LlmsysLlamaForCausalLM
from .token_text import token_label


def first_layers(model: LlmsysLlamaForCausalLM, n: int) -> LlmsysLlamaForCausalLM:
    """A copy of ``model`` keeping only its first ``n`` decoder layers (same embeddings, norm and head)."""
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = n
    config.layer_types = None if getattr(config, "layer_types", None) is None else config.layer_types[:n]
    short = LlmsysLlamaForCausalLM(config)
    short.load_state_dict(model.state_dict(), strict=False)  # drops layers >= n
    return short.eval()


@functools.lru_cache(maxsize=1)
def untrained_pair():
    """(tokenizer, {"none": model, "rope": model}): one-layer random models on a byte-level BPE, seed 0."""
    from ..data.tokenizer import train_bpe_tokenizer

    tokenizer = train_bpe_tokenizer(["床前明月光，疑是地上霜。 the quick brown fox"], vocab_size=300)
    models = {}
    for kind in ("none", "rope"):
        torch.manual_seed(0)
        config = LlmsysLlamaConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=1,
                                   num_attention_heads=4, intermediate_size=128, position_embedding_type=kind,
                                   max_position_embeddings=64)  # fmt: skip
        models[kind] = LlmsysLlamaForCausalLM(config).eval()
    return tokenizer, models


@torch.no_grad()
def next_token_probs(model, tokenizer, text: str) -> torch.Tensor:
    """Next-token distribution (V,) after ``text`` (no special tokens)."""
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    return model(input_ids=ids).logits[0, -1].float().softmax(-1)


def compare_orders(models: dict, tokenizer, text_a: str, text_b: str, trained: bool) -> pd.DataFrame:
    """One row per (model, depth): total variation between the two next-token distributions, top tokens."""
    rows = []
    for kind, model in models.items():
        depths = sorted({1, model.config.num_hidden_layers})
        for depth in depths:
            m = model if depth == model.config.num_hidden_layers else first_layers(model, depth)
            p, q = next_token_probs(m, tokenizer, text_a), next_token_probs(m, tokenizer, text_b)
            top = [token_label(tokenizer, i) for i in p.topk(3).indices.tolist()]  # partial UTF-8 bytes as \xNN
            rows.append({
                "model": {"none": "NoPE", "rope": "RoPE"}[kind] + ("" if trained else " (untrained)"),
                "layers": depth, "total variation": 0.5 * float((p - q).abs().sum()),
                "max |Δp|": float((p - q).abs().max()), f"top-3 after {text_a}": " | ".join(top),
            })  # fmt: skip
    return pd.DataFrame(rows)


def token_summary(tokenizer, text_a: str, text_b: str) -> str:
    """Whether the two texts hold the same multiset of tokens and the same last token (the premise)."""
    a = tokenizer(text_a, add_special_tokens=False)["input_ids"]
    b = tokenizer(text_b, add_special_tokens=False)["input_ids"]
    same_bag, same_last = sorted(a) == sorted(b), bool(a and b and a[-1] == b[-1])
    verdict = "the same tokens in another order" if same_bag and same_last else "NOT a reordering of the same tokens"
    return f"{len(a)} and {len(b)} tokens: {verdict} (last token equal: {same_last})."
