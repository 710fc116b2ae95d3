"""llama.cpp's ``llama`` architecture: what it computes, which of our configs it expresses, and its keys and tensors.

What llama.cpp's ``llama`` graph computes (``src/models/llama.cpp``): token embedding, per layer RMSNorm ->
attention with RoPE (GQA allowed, scores scaled by 1/sqrt(head_dim)) -> residual -> RMSNorm -> SwiGLU
(``down(silu(gate(x)) * up(x))``) -> residual, final RMSNorm, output projection (``token_embd`` reused when there
is no ``output`` tensor). A config expresses exactly that or it is refused, one line naming the feature:
LayerNorm, non-gated or non-SiLU MLPs, biases, positions other than RoPE, windowed or sparse layers, RoPE scaling
other than linear / llama3.

The weights first take the transformers export's exact rewrites (``decoder_weights.py``): a query scale other than
1/sqrt(head_dim) folded into ``q_proj``, Meta's interleaved RoPE rows (``rope_interleaved=True``) moved to
transformers' halves. What is left is transformers' Llama, which llama.cpp's converter then maps
(``convert_hf_to_gguf.py`` / ``conversion/llama.py`` and ``base.py``, read in the sources the ``llama-cpp-python``
0.3.36 sdist vendors):

- tensor names from gguf's table for ``MODEL_ARCH.LLAMA`` (``get_tensor_name_map``: ``model.layers.N.self_attn.
  q_proj`` -> ``blk.N.attn_q`` ...); ``output`` only when the LM head is not tied to the embedding;
- llama.cpp rotates adjacent feature pairs (Meta's layout); transformers' rotate-half layout pairs feature i with
  i + D/2, so q rows are permuted per head: ``w.reshape(n_head, 2, D/2, in).swapaxes(1, 2)``, k the same with
  ``n_kv_head`` (``LlamaModel.permute``);
- llama3 RoPE scaling as the ``rope_freqs`` tensor of per-frequency divisors; linear scaling as
  ``rope.scaling.type`` / ``factor``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import gguf
import torch

from .decoder_weights import fold_attention_scale, permute_interleaved_rope
from .transformers_targets import gated_activation

ARCH = gguf.MODEL_ARCH.LLAMA
ROPE_TYPES = ("default", "linear", "llama3")  # the RoPE variants llama.cpp's llama graph computes


def llama_gguf_refusal(config) -> str | None:
    """Why ``config`` is not llama.cpp's llama architecture (the first feature that differs), or None."""
    activation = gated_activation(config)
    checks = [
        (config.norm_type == "rmsnorm", f"norm_type={config.norm_type!r} (llama.cpp's llama normalises with RMSNorm)"),
        (activation == "silu", f"MLP hidden_act={config.hidden_act!r}, mlp_gated={config.mlp_gated} (llama.cpp's "
         "llama MLP is SwiGLU: down(silu(gate(x)) * up(x)))"),
        (config.position_embedding_type == "rope", f"position_embedding_type={config.position_embedding_type!r} "
         "(llama.cpp's llama uses RoPE only)"),
        (not config.attention_bias, "attention_bias=True (the llama GGUF written here has no q/k/v biases)"),
        (not config.attention_out_bias, "attention_out_bias=True (the llama GGUF written here has no output "
         "projection bias)"),
        (not config.mlp_bias, "mlp_bias=True (the llama GGUF written here has no MLP biases)"),
    ]  # fmt: skip
    for ok, why in checks:
        if not ok:
            return why
    layouts = sorted(set(config.layer_layouts()))
    if layouts != ["dense"]:
        return f"attention_layout {layouts} (llama.cpp's llama attends densely; windowed or sparse layers differ)"
    rope_type = (config.rope_parameters or {}).get("rope_type", "default")
    if rope_type not in ROPE_TYPES:
        return f"rope_type={rope_type!r} (written here: {', '.join(ROPE_TYPES)})"
    return None


def write_llama_hparams(writer: gguf.GGUFWriter, config) -> None:
    """The ``llama.*`` keys llama.cpp reads for this architecture (``llama-model.cpp``, ``load_hparams``)."""
    head_dim = config.head_dim
    rope = config.rope_parameters or {}
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(rope.get("rope_theta", 10000.0)))
    if rope.get("rope_type") == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(rope["factor"]))
    writer.add_layer_norm_rms_eps(float(config.norm_eps))
    writer.add_vocab_size(config.vocab_size)


def llama_tensors(model) -> Iterator[tuple[str, torch.Tensor]]:
    """(GGUF name, float32 tensor) for every weight, in llama.cpp's llama layout.

    First the rewrites of the transformers export (``decoder_weights``: our attention scale folded into q_proj,
    Meta's interleaved RoPE rows to transformers' halves), which leave transformers' Llama weights; then the step of
    llama.cpp's own converter from those: q/k rows to adjacent pairs.
    """
    config = model.config
    state = {name: weight.detach().float().cpu() for name, weight in model.state_dict().items()}
    if config.tie_word_embeddings:
        del state["lm_head.weight"]  # llama.cpp falls back to token_embd when the file has no output tensor
    fold_attention_scale(state, config, config.head_dim**-0.5)  # llama.cpp scales scores by 1/sqrt(head_dim)
    permute_interleaved_rope(state, config)
    names = gguf.get_tensor_name_map(ARCH, config.num_hidden_layers)
    for hf_name, weight in state.items():
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise ValueError(f"tensor {hf_name}: no llama.cpp llama tensor corresponds to it (speed layer applied?)")
        if hf_name.endswith("q_proj.weight"):
            weight = _permute_rope_rows(weight, config.num_attention_heads)
        elif hf_name.endswith("k_proj.weight"):
            weight = _permute_rope_rows(weight, config.num_key_value_heads)
        yield name, weight
    if (rope_freqs := _llama3_rope_freqs(config)) is not None:
        yield gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight", rope_freqs


def _permute_rope_rows(weight: torch.Tensor, n_head: int) -> torch.Tensor:
    """Rotate-half row order -> adjacent pairs, per head (llama.cpp's ``LlamaModel.permute``): rows (heads * D, in)
    viewed (heads, 2, D/2, in), the two halves interleaved."""
    rows = weight.shape[0]
    return weight.reshape(n_head, 2, rows // n_head // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _llama3_rope_freqs(config) -> torch.Tensor | None:
    """Llama 3.1's per-frequency divisors (``rope_freqs``) for rope_type "llama3", else None (converter's formula)."""
    rope = config.rope_parameters or {}
    if rope.get("rope_type") != "llama3":
        return None
    dim = config.head_dim
    freqs = 1.0 / (rope.get("rope_theta", 10000.0) ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    old_context = rope["original_max_position_embeddings"]
    wavelen = 2 * math.pi / freqs
    smooth = (old_context / wavelen - low) / (high - low)
    between = 1 / ((1 - smooth) / factor + smooth)
    return torch.where(wavelen < old_context / high, 1.0, torch.where(wavelen > old_context / low, factor, between))
