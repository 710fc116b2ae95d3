"""Exact rewrites of a decoder's weights for a transformers class that computes attention a little differently.

Legend: H query heads, G key/value heads, D head_dim, d hidden_size; a projection weight is (out, in) as in
``nn.Linear``; our state dict uses transformers' Llama names (``model.layers.i.self_attn.q_proj.weight``, ...).

- Attention scale: scores are (W_q x + b_q) . k * s. A target that multiplies by t instead computes the same
  scores from q' = (s / t) q, so W_q and b_q are multiplied by s / t (RoPE rotates q linearly: it commutes).
- Meta's interleaved RoPE pairs (x_2i, x_2i+1) -> transformers' halves (x_i, x_i+D/2): per head, row 2i + j of
  W_q / W_k (and b_q / b_k) moves to row j * D/2 + i (transformers' ``convert_llama_weights_to_hf.permute``).
- GPT-Neo has no q/k/v biases. softmax_j(q_i . (k_j + b_k)) = softmax_j(q_i . k_j): a key bias adds the same
  q_i . b_k to every score of row i, so it drops out. sum_j p_ij (v_j + b_v) = sum_j p_ij v_j + b_v (each row of
  p sums to 1), so the value bias leaves the attention as a constant: W_o b_v moves into the output bias. A query
  bias adds b_q . k_j, which differs per key: it has no exact rewrite and is refused unless it is zero.
"""

from __future__ import annotations

import torch

ATTENTION = "model.layers.{i}.self_attn."


def attention_prefixes(config) -> list[str]:
    return [ATTENTION.format(i=i) for i in range(config.num_hidden_layers)]


def fold_attention_scale(state: dict, config, target_scale: float) -> None:
    """In place: q_proj weight (and bias) times (our scale / the target's), so the target's scores equal ours."""
    ours = config.head_dim**-0.5 if config.attention_scale is None else config.attention_scale
    ratio = ours / target_scale
    if ratio == 1.0:
        return
    for prefix in attention_prefixes(config):
        for name in ("q_proj.weight", "q_proj.bias"):
            if prefix + name in state:
                state[prefix + name] = state[prefix + name] * ratio


def interleaved_to_halves(rows: torch.Tensor, heads: int) -> torch.Tensor:
    """Rows (heads * D, ...) in Meta's adjacent-pair RoPE order -> transformers' rotate-half order."""
    tail = rows.shape[1:]
    per_head = rows.reshape(heads, -1, 2, *tail)  # (heads, D/2, 2, ...)
    return per_head.transpose(1, 2).reshape(rows.shape)


def permute_interleaved_rope(state: dict, config) -> None:
    """In place: q and k projection rows from interleaved pairs to halves (no-op for ``rope_interleaved=False``)."""
    if not config.rope_interleaved:
        return
    for prefix in attention_prefixes(config):
        for proj, heads in (("q_proj", config.num_attention_heads), ("k_proj", config.num_key_value_heads)):
            for kind in ("weight", "bias"):
                if f"{prefix}{proj}.{kind}" in state:
                    state[f"{prefix}{proj}.{kind}"] = interleaved_to_halves(state[f"{prefix}{proj}.{kind}"], heads)


def fold_biases_for_gpt_neo(state: dict, config) -> None:
    """In place: drop the key bias, move W_o b_v into the output bias, refuse a non-zero query bias."""
    for i, prefix in enumerate(attention_prefixes(config)):
        q_bias = state.pop(prefix + "q_proj.bias", None)
        if q_bias is not None and torch.count_nonzero(q_bias):
            raise ValueError(
                f"cannot export to transformers: layer {i} has a non-zero query bias (attention_bias=True): GPT-Neo "
                "has no q/k/v biases and a query bias does not fold into other weights (a key bias cancels in the "
                "softmax, a value bias moves into the output bias); nearest target: gpt_neo (zero or drop q_proj.bias, "
                "or train with attention_bias=False)."
            )
        state.pop(prefix + "k_proj.bias", None)
        v_bias = state.pop(prefix + "v_proj.bias", None)
        if v_bias is not None:
            out_weight = state[prefix + "o_proj.weight"]
            out_bias = state.get(prefix + "o_proj.bias", torch.zeros_like(out_weight[:, 0]))
            state[prefix + "o_proj.bias"] = out_bias + (out_weight.double() @ v_bias.double()).to(out_weight.dtype)
