"""llama.cpp's ``gpt2`` architecture: a dense ``llmsys_gpt3`` (LayerNorm, GELU MLP, learned positions) as GPT-2.

What llama.cpp's ``gpt2`` graph computes (``src/models/gpt2.cpp``): token embedding + learned position embedding
(``position_embd``, one row per position up to ``context_length``), per layer LayerNorm (weight and bias) ->
attention through one fused q|k|v projection with bias, scores scaled by 1/sqrt(head_dim), output projection with
bias -> residual -> LayerNorm -> ``down(gelu(up(x) + b) ) + b`` -> residual, final LayerNorm, output projection
(``token_embd`` reused when the file has no ``output``). Every bias and norm tensor is required by its loader.
``ggml_gelu`` is the tanh approximation (GPT-2's ``gelu_new``; on the CPU it reads a float16 table of it).

A config expresses exactly that or is refused with one line naming the feature: RMSNorm, a gated MLP, an activation
other than tanh-approximated GELU, positions other than learned absolute ones, local or sparse layers, grouped-query
attention or ``head_dim * heads != hidden_size``.

The weights go the way a GPT-2 checkpoint goes through llama.cpp's converter (``conversion/gpt2.py``,
``GPT2Model``, in the sources the ``llama-cpp-python`` 0.3.36 sdist vendors): first our model becomes transformers'
``GPT2LMHeadModel`` state dict by the transformers export (``decoder_targets.gpt2_family_target``: our attention
scale folded into the query rows of ``c_attn``, biases our model lacks written as zeros, ``Conv1D`` [in, out]
layout), then the converter's step: ``c_attn`` / ``c_proj`` / ``c_fc`` weights transposed back to [out, in] and the
names mapped through gguf's table for ``MODEL_ARCH.GPT2`` (``transformer.h.N.attn.c_attn`` -> ``blk.N.attn_qkv``,
``transformer.wpe`` -> ``position_embd``, ...). Keys as the converter writes them (``set_gguf_parameters``):
``gpt2.context_length``, ``embedding_length``, ``feed_forward_length``, ``block_count``, ``attention.head_count``,
``attention.layer_norm_epsilon``.
"""

from __future__ import annotations

from collections.abc import Iterator

import gguf
import torch

from .decoder_targets import decoder_target

ARCH = gguf.MODEL_ARCH.GPT2
TANH_GELU = ("gelu_new", "gelu_pytorch_tanh")  # transformers' names of the tanh approximation ggml_gelu computes
CONV1D_WEIGHTS = (".c_attn.weight", ".c_proj.weight", ".c_fc.weight")  # stored [in, out] by GPT-2's Conv1D
UNBIASED = ("token_embd", "position_embd", "output.")  # the only gpt2 weights without a bias tensor


def gpt2_gguf_refusal(config) -> str | None:
    """Why ``config`` is not llama.cpp's gpt2 architecture (the first feature that differs), or None."""
    checks = [
        (config.norm_type == "layernorm", f"norm_type={config.norm_type!r} (llama.cpp's gpt2 normalises with "
         "LayerNorm)"),
        (not config.mlp_gated and config.hidden_act in TANH_GELU, f"MLP hidden_act={config.hidden_act!r}, "
         f"mlp_gated={config.mlp_gated} (llama.cpp's gpt2 MLP is down(gelu(up(x))) with the tanh approximation: "
         "hidden_act='gelu_new')"),
        (config.position_embedding_type == "learned", f"position_embedding_type={config.position_embedding_type!r} "
         "(llama.cpp's gpt2 adds learned absolute positions)"),
        (config.num_key_value_heads == config.num_attention_heads, f"num_key_value_heads={config.num_key_value_heads}"
         f" < num_attention_heads={config.num_attention_heads} (GPT-2 has one key/value head per query head)"),
        (config.head_dim * config.num_attention_heads == config.hidden_size, f"head_dim={config.head_dim} x "
         f"{config.num_attention_heads} heads != hidden_size={config.hidden_size} (GPT-2 derives head_dim from it)"),
    ]  # fmt: skip
    for ok, why in checks:
        if not ok:
            return why
    layouts = sorted(set(config.layer_layouts()))
    if layouts != ["dense"]:
        return f"attention_layout {layouts} (llama.cpp's gpt2 attends densely; windowed or sparse layers differ)"
    return None


def write_gpt2_hparams(writer: gguf.GGUFWriter, config) -> None:
    """The ``gpt2.*`` keys llama.cpp reads (``llama_model_gpt2::load_arch_hparams`` and the common ones)."""
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_head_count(config.num_attention_heads)
    writer.add_layer_norm_eps(float(config.norm_eps))


def gpt2_tensors(model) -> Iterator[tuple[str, torch.Tensor]]:
    """(GGUF name, float32 tensor) for every weight, in llama.cpp's gpt2 layout (see the module docstring); a bias
    our model lacks (``attention_bias=False``, ``norm_bias=False``, ...) is written as zeros, which llama.cpp's gpt2
    loader requires and which adds nothing."""
    config = model.config
    state = {name: weight.detach().float().cpu() for name, weight in model.state_dict().items()}
    if config.tie_word_embeddings:
        del state["lm_head.weight"]  # llama.cpp falls back to token_embd when the file has no output tensor
    gpt2_state = decoder_target(config).weights(state, config)
    names = gguf.get_tensor_name_map(ARCH, config.num_hidden_layers)
    tensors = {}
    for hf_name, weight in gpt2_state.items():
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise ValueError(f"tensor {hf_name}: no llama.cpp gpt2 tensor corresponds to it (speed layer applied?)")
        tensors[name] = (weight.transpose(0, 1) if hf_name.endswith(CONV1D_WEIGHTS) else weight).contiguous()
    for name, weight in list(tensors.items()):
        bias = name.removesuffix(".weight") + ".bias"
        if name.endswith(".weight") and not name.startswith(UNBIASED) and bias not in tensors:
            tensors[bias] = torch.zeros(weight.shape[0])  # [out] of an [out, in] matrix, or a norm's [hidden]
    yield from tensors.items()
