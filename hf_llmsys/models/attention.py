"""Grouped-query self-attention shared by every hf-llmsys decoder (and, as self-attention, by the encoder).

Legend: B batch, S query length, K key length, H query heads, G key/value heads (H % G == 0), D head_dim.
num_key_value_heads G = H is multi-head attention (Vaswani et al. 2017), G = 1 multi-query (Shazeer 2019),
1 < G < H grouped-query (Ainslie et al. 2023). D is independent of hidden_size / H.

q, k and v come from ONE fused projection ``qkv_proj`` (rows: H*D query, G*D key, G*D value), so a decoding step
costs one matmul instead of three; checkpoints with separate ``q_proj`` / ``k_proj`` / ``v_proj`` are fused when
loaded (``weight_conversion.py``). The kernel is picked through transformers' attention interface from
``config._attn_implementation`` (eager, sdpa, flex_attention, flash_attention_2, or a registered custom one); the
KV cache is any transformers ``Cache``; masks come from transformers' masking utilities.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from transformers.integrations.sdpa_attention import pack_gqa, repeat_kv
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .positions import PositionState
from .projection import Projection
from .recompute import active_recomputation, plain_linear


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    position_bias: torch.Tensor | None = None,
    relative_values: Callable[[torch.Tensor], torch.Tensor] | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T * scaling + bias + mask) v (+ relative_values(probs)), in plain PyTorch ops.

    query (B, H, S, D), key/value (B, G, K, D), attention_mask additive (B, 1, S, K) or None,
    position_bias additive (B or 1, H, S, K) or None, relative_values probs (B, H, S, K) -> (B, H, S, D) or None
    (Shaw et al. 2018's value embeddings). Returns output (B, S, H, D) and probabilities (B, H, S, K).
    """
    key = repeat_kv(key, module.num_key_value_groups)  # (B, H, K, D)
    value = repeat_kv(value, module.num_key_value_groups)
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling  # (B, H, S, K)
    if position_bias is not None:
        scores = scores + position_bias
    if attention_mask is not None:
        scores = scores + attention_mask
    probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    probs = nn.functional.dropout(probs, p=dropout, training=module.training)
    output = torch.matmul(probs, value)  # (B, H, S, D)
    if relative_values is not None:
        output = output + relative_values(probs)
    output = output.transpose(1, 2).contiguous()  # (B, S, H, D)
    return output, probs


def own_storage_if_saved(value: torch.Tensor, qkv: torch.Tensor, qk: torch.Tensor, cache) -> torch.Tensor:
    """value (B, S, G, D), a view of the fused projection ``qkv`` (B, S, H+2G, D): a copy of it where the attention
    would otherwise keep ``qkv`` alive for its backward through it alone.

    SDPA (and flex, flash) save their inputs as given: a view of ``qkv`` keeps the whole (B, S, H+2G, D) projection
    for the backward. Where the rotation gave q and k their own storage ``qk`` (RoPE) and no cache copies k and v,
    v is the only such view, so a (B, S, G, D) copy frees the rest of the projection: (H+G) x D floats per token per
    layer (SmolLM2: 3 MiB per 1,024 fp32 tokens) for a copy of G x D. Without a gradient nothing is saved, and
    without a rotation q and k keep ``qkv`` anyway (learned or relative positions): the view as it is. Under
    ``torch.compile`` too: AOTAutograd chooses what its graph saves (and storage identity would break the graph)."""
    if torch.compiler.is_compiling() or cache is not None or not (torch.is_grad_enabled() and value.requires_grad):
        return value
    if qk.untyped_storage().data_ptr() == qkv.untyped_storage().data_ptr():
        return value
    return value.clone(memory_format=torch.contiguous_format)


# Device type -> dtypes whose fused SDPA kernels take no grouped heads: there, grouped-query attention under "sdpa"
# does not pass ``enable_gqa`` (``sdpa_without_grouped_heads``). On CUDA (torch 2.11, H200) fp32 SDPA with
# ``enable_gqa`` falls back to the math kernel (flash and cuDNN take no fp32, memory-efficient attention no grouped
# heads): for one decoding token 11 kernels and 244 us a call, copying every cached key and value H/G times; packed
# onto the key/value heads, memory-efficient attention: 2 kernels, 70 us. For longer queries the math kernel also
# builds and, in training, keeps the (B, H, S, K) scores. bf16 takes ``enable_gqa`` in cuDNN's kernel (1 kernel,
# 49 us; packed 64-71 us), and the CPU's SDPA kernel takes grouped heads too (``scripts/bench/
# decode_step_overhead.py``). Read per call.
SDPA_WITHOUT_GROUPED_HEADS: dict[str, set[torch.dtype]] = {"cuda": {torch.float32}}


def sdpa_lacks_grouped_heads(query: torch.Tensor, key: torch.Tensor, implementation: str | None) -> bool:
    """Whether ``sdpa_without_grouped_heads`` computes this call: "sdpa", H > G heads, and a device and dtype listed
    in ``SDPA_WITHOUT_GROUPED_HEADS``. query (B, H, S, D), key (B, G, K, D)."""
    return (
        implementation == "sdpa"
        and query.shape[1] != key.shape[1]
        and query.dtype in SDPA_WITHOUT_GROUPED_HEADS.get(query.device.type, ())
    )


# Device type -> dtypes where one decoding token under "sdpa" that comes with a mask (a pre-allocated cache's, or
# padding) is packed onto the key/value heads (``packed_decode_attention``) here, compiled or not. transformers'
# ``sdpa_attention_forward`` packs it only in eager; traced by torch.compile it repeats every cached key and value to
# the H query heads (``repeat_kv``), which inductor on the CPU runs as a (B, H, K, D) copy per layer and token. SDPA
# alone on the CPU (torch 2.13, 2 threads, a boolean (B, 1, 1, K) mask), compiled, repeated against packed, fp32:
# H 8, G 4, K 383: 99 against 84 us a call at batch 1, 903 against 276 us at batch 8; H 9, G 3, K 2048 (SmolLM2):
# 444 against 231 us; bf16: 280 against 82, 1733 against 310 and 1350 against 252 us. A static-cache greedy decode
# compiled by ``generate`` (``llama_vs_hf.py``'s default shape, batch 1): 9.14 against 8.40 ms a token, the same
# tokens. Without a mask transformers passes ``enable_gqa``, which the CPU kernel takes itself, at least as fast as
# packing (K 2048: 155 against 185 us eager): left to it.
PACKED_MASKED_DECODING: dict[str, set[torch.dtype]] = {"cpu": {torch.float32, torch.bfloat16}}


def packs_masked_decoding(
    query: torch.Tensor, key: torch.Tensor, attention_mask: torch.Tensor | None, implementation: str | None
) -> bool:
    """Whether ``packed_decode_attention`` computes this call (``PACKED_MASKED_DECODING``): "sdpa", one query token,
    H > G heads, a mask, and a listed device and dtype. query (B, H, 1, D), key (B, G, K, D)."""
    return (
        implementation == "sdpa"
        and query.shape[2] == 1
        and attention_mask is not None
        and query.shape[1] != key.shape[1]
        and query.dtype in PACKED_MASKED_DECODING.get(query.device.type, ())
    )


def packed_decode_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None, scaling: float
) -> torch.Tensor:
    """One query token of grouped-query attention as plain attention over the G key/value heads.

    query (B, H, 1, D) -> (B, G, H/G, D): the H/G query heads that share a key/value head become its rows, which see
    the same keys (one token: no causal order among them). key/value (B, G, K, D); attention_mask None or additive /
    boolean (B, 1 or H, 1, K) (packed alike). Returns (B, 1, H, D), as transformers' attention functions do; the same
    arithmetic as SDPA with ``enable_gqa`` (row h of the output is query head h).
    """
    batch, heads, _, dim = query.shape
    groups = heads // key.shape[1]
    output = nn.functional.scaled_dot_product_attention(
        pack_gqa(query, groups), key, value, attn_mask=pack_gqa(attention_mask, groups), scale=scaling
    )  # (B, G, H/G, D)
    return output.reshape(batch, heads, 1, dim).transpose(1, 2)


def sdpa_without_grouped_heads(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
) -> torch.Tensor:
    """Grouped-query SDPA without ``enable_gqa``: transformers' ``sdpa_attention_forward`` for a kernel that takes
    no grouped heads. One query token: ``packed_decode_attention``. Longer: key and value repeated to the H query
    heads (``repeat_kv``; a (B, H, K, D) copy each, against the (B, H, S, K) scores of the math kernel), causal when
    there is no mask and the module is causal (keys past the queries' length dropped then, as transformers does for a
    pre-allocated cache's prefill). query (B, H, S, D), key/value (B, G, K, D), attention_mask (B, 1 or H, S, K) or
    None -> (B, S, H, D)."""
    if query.shape[2] == 1:
        return packed_decode_attention(query, key, value, attention_mask, module.scaling)
    is_causal = attention_mask is None and module.is_causal
    if is_causal and key.shape[2] > query.shape[2]:
        key, value = key[:, :, : query.shape[2]], value[:, :, : query.shape[2]]
    groups = query.shape[1] // key.shape[1]
    output = nn.functional.scaled_dot_product_attention(
        query, repeat_kv(key, groups), repeat_kv(value, groups), attn_mask=attention_mask, dropout_p=dropout,
        is_causal=is_causal, scale=module.scaling,
    )  # fmt: skip
    return output.transpose(1, 2)


class GroupedQueryAttention(nn.Module):
    """Self-attention with H query heads sharing G key/value heads, a fused qkv projection and a KV cache."""

    def __init__(self, config, layer_idx: int, is_causal: bool = True):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.is_causal = is_causal
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.head_dim = config.head_dim
        # None: 1/sqrt(D) (Vaswani et al.); GPT-Neo and T5 use 1.0 (their init absorbs the scale).
        scale = getattr(config, "attention_scale", None)
        self.scaling = self.head_dim**-0.5 if scale is None else scale
        self.attention_dropout = config.attention_dropout
        bias = config.attention_bias
        fused_heads = self.num_heads + 2 * self.num_key_value_heads
        out_bias = getattr(config, "attention_out_bias", None)  # GPT-Neo: no q/k/v bias, but an output bias
        self.qkv_proj = Projection(config.hidden_size, fused_heads * self.head_dim, bias=bias)
        o_bias = bias if out_bias is None else out_bias
        self.o_proj = Projection(self.num_heads * self.head_dim, config.hidden_size, bias=o_bias)

    def sliding_window(self) -> int | None:
        """The band width of this layer when the config marks it "sliding_attention" (GPT-3's local layers), else None.

        Read per call: transformers' tests and users may change ``config.sliding_window`` after building the model.
        """
        layer_types = getattr(self.config, "layer_types", None)
        if not layer_types or layer_types[self.layer_idx] != "sliding_attention":
            return None
        return self.config.sliding_window

    def rebuild_in_backward(
        self, hidden_states: torch.Tensor, qkv: torch.Tensor, qk: torch.Tensor, positions: PositionState, cache
    ) -> bool:
        """In a training forward whose input the backward rebuilds anyway (the decoder layer's norm output,
        ``recompute.py``), have it rebuild the projection ``qkv`` (B, S, H+2G, D) and the rotated heads ``qk``
        (B, S, H+G, D) too, instead of keeping them for the attention's backward (which saves q, k and v): one
        (B, S, H+2G, D) matmul and one rotation more per layer in the backward, (H+2G) x D floats less kept per
        token and layer (SmolLM2: 3.75 MiB per 1,024 fp32 tokens). Only for a plain ``qkv_proj`` (an adapter such
        as LoRA may draw dropout, and hooks would see a second call) and without a cache (its k/v copies are
        saved instead); returns whether the tensors were registered."""
        recomputation = active_recomputation()
        if recomputation is None or cache is not None or not qkv.requires_grad or not plain_linear(self.qkv_proj):
            return False
        rebuild_input = recomputation.rebuilder(hidden_states)
        if rebuild_input is None:
            return False
        qkv_shape, heads_qk, rotate = qkv.shape, qk.shape[2], positions.rotate  # captured: no tensor is held
        linear = self.qkv_proj.linear  # the training forward's own F.linear: the rebuild repeats it bitwise
        recomputation.add(qkv, lambda: linear(rebuild_input()).view(qkv_shape))
        if qk.untyped_storage().data_ptr() != qkv.untyped_storage().data_ptr():  # RoPE; else qk is a view of qkv
            rebuild_qkv = recomputation.rebuilder(qkv)
            recomputation.add(qk, lambda: rotate(rebuild_qkv()[:, :, :heads_qk]))
        return True

    def forward(
        self,
        hidden_states: torch.Tensor,
        positions: PositionState,
        attention_mask: torch.Tensor | None = None,
        cache=None,
        kernel: Callable | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """hidden_states (B, S, hidden) -> (B, S, hidden), attention probabilities (eager only) or None.

        ``attention_mask``: the mask for the configured attention function (transformers' masking utilities).
        ``kernel``: a layout kernel (``sparse_layouts.AttentionLayout.kernel``) that computes this call instead.
        """
        batch, seq_len, _ = hidden_states.shape
        heads_qk = self.num_heads + self.num_key_value_heads
        qkv = self.qkv_proj(hidden_states).view(batch, seq_len, -1, self.head_dim)  # (B, S, H+2G, D)
        # views by split, not slices: a slice's backward zero-fills a gradient of its whole base, and the slices'
        # gradients are then added; split's backward joins them in one cat (same values)
        qk, value = qkv.split([heads_qk, self.num_key_value_heads], dim=2)  # (B, S, H+G, D), (B, S, G, D)
        qk = positions.rotate(qk)  # rotate q and k heads in one call
        query, key = (part.transpose(1, 2) for part in qk.split([self.num_heads, self.num_key_value_heads], dim=2))
        if not self.rebuild_in_backward(hidden_states, qkv, qk, positions, cache):
            value = own_storage_if_saved(value, qkv, qk, cache)
        value = value.transpose(1, 2)  # (B, G, S, D)
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx)  # (B, G, K, D)

        implementation = self.config._attn_implementation
        if kernel is not None:  # a sparse layout computed without any mask (sparse_layouts.py)
            attention = kernel
        else:
            attention = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
        bias = positions.attention_bias_for(query, self.layer_idx)  # (B or 1, H, S, K) or None
        value_term = positions.value_term(self.layer_idx)
        window = self.sliding_window()
        dropout = self.attention_dropout if self.training else 0.0
        if (
            kernel is None
            and bias is None
            and value_term is None
            and window is None
            and not (dropout > 0 and seq_len == 1)  # one token packs without dropout: none in decoding
        ):
            output = None
            if sdpa_lacks_grouped_heads(query, key, implementation):
                output = sdpa_without_grouped_heads(self, query, key, value, attention_mask, dropout)  # (B, S, H, D)
            elif packs_masked_decoding(query, key, attention_mask, implementation):
                output = packed_decode_attention(query, key, value, attention_mask, self.scaling)  # (B, 1, H, D)
            if output is not None:
                return self.o_proj(output.reshape(batch, seq_len, -1)), None
        if bias is not None:  # full size: flex_attention indexes it by batch
            kwargs["position_bias"] = bias.expand(batch, -1, -1, -1)
        if value_term is not None:
            kwargs["relative_values"] = value_term  # eager only (checked by the positional encoding)
        if window is not None:
            kwargs["sliding_window"] = window  # flash attention bands the layer itself (it takes no mask), as Mistral
        output, probs = attention(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=self.scaling,
            **kwargs,
        )
        output = output.reshape(batch, seq_len, -1)  # (B, S, H*D)
        return self.o_proj(output), probs
