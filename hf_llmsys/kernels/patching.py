"""``apply`` / ``applied``: the speed layer put on a model instance from outside, as Liger's instance patching does.

Every change is a swap of a module's ``__class__`` for a subclass defined in ``hf_llmsys/kernels/`` (same
parameters, same state dict, same math; a module whose class is exactly the plain one is swapped, a subclass someone
else made is left alone), of a decoder layer's ``layout`` object, or of the model's own class (``model_classes.py``,
under the plain class's names, so ``save_pretrained`` writes the same ``config.json`` and ships the same modeling
files). ``apply`` first undoes what an earlier ``apply`` did, so the options given are the state after it and a
second call with the same options changes nothing. What each option swaps:

- ``norms``: ``RMSNorm`` -> ``rms_norm.KernelRMSNorm`` (saves x and rstd only; fused kernels where they apply).
- ``swiglu``: ``GatedMLP`` with silu -> ``swiglu.SwiGLUMLP``; transformers' ``gelu_new`` -> ``swiglu.FusedNewGELU``.
- ``recompute``: ``DecoderLayer`` -> ``recompute.RecomputingDecoderLayer`` (norm outputs rebuilt in the backward,
  on the CPU).
- ``linear``: Gated DeltaNet ``GatedDeltaNet`` -> ``linear_kernels.FlaGatedDeltaNet`` (flash-linear-attention's
  ``chunk_gated_delta_rule`` / ``fused_recurrent_gated_delta_rule`` on CUDA when ``fla`` imports, the plain chunked
  torch form elsewhere).
- ``sparse_blocks``: local / strided / fixed layouts -> ``layout_kernels`` block-kernel layouts (sdpa, plain inputs);
  ``attention_recompute``: those kernels keep only q, k, v for the backward.
- ``decode``: ``nn.Linear`` -> ``weight_major.Projection`` (few-row CPU fp32 inference); grouped-query
  ``GroupedQueryAttention`` -> ``decode_attention.DecodingAttention``; ``generate``'s default cache -> ``GrowingCache``.
- ``loss_chunk_size``: training forwards with labels compute ``chunked_linear_cross_entropy`` (None: the device's
  ``default_chunk_size``, 0: off).

Each kernel decides per call what the device and dtype allow (``FUSED_AUTOGRAD_NORM_DEVICES``,
``RECOMPUTING_DEVICES``, ``PACKED_MASKED_DECODING``, ``SDPA_WITHOUT_GROUPED_HEADS``, the weight-major rule, the flash
block path), as the model code did before the speed layer moved out of it; a model moved to another device after
``apply`` stays right.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from torch import nn
from transformers.activations import NewGELUActivation
from transformers.utils import logging

from ..models.attention import GroupedQueryAttention
from ..models.decoder_layer import DecoderLayer
from ..models.feed_forward import GatedMLP
from ..models.linear_attention import GatedDeltaNet
from ..models.modeling_base import LlmsysPreTrainedModel
from ..models.norms import RMSNorm
from .decode_attention import DecodingAttention
from .layout_kernels import SPARSE_KINDS, BlockKernels, with_block_kernel
from .linear_kernels import FlaGatedDeltaNet
from .model_classes import OPTIONS_ATTRIBUTE, ModelKernels, chunk_size_for, mixin_for, model_class
from .recompute import RecomputingDecoderLayer
from .rms_norm import KernelRMSNorm
from .swiglu import SILU_TYPES, FusedNewGELU, SwiGLUMLP
from .weight_major import Projection

logger = logging.get_logger(__name__)


def _grouped(attention: GroupedQueryAttention, parent: nn.Module, name: str) -> bool:
    return attention.num_key_value_heads != attention.num_heads


def _silu(mlp: GatedMLP, parent: nn.Module, name: str) -> bool:
    return isinstance(mlp.act_fn, SILU_TYPES)


def _model_projection(linear: nn.Linear, parent: nn.Module, name: str) -> bool:
    """A projection of the model's own blocks, or the base layer an adapter wraps (not an adapter's own weights:
    PEFT's lora_A / lora_B stay as PEFT made them)."""
    return name == "base_layer" or type(parent).__module__.startswith("hf_llmsys.")


# option -> (plain class, kernel class, which modules of the plain class: fn(module, parent, name) or None for all);
# the plain class is the kernel class's last base, so undoing a swap needs no record
MODULE_SWAPS: dict[str, list[tuple[type[nn.Module], type[nn.Module], Callable | None]]] = {
    "norms": [(RMSNorm, KernelRMSNorm, None)],
    "swiglu": [(GatedMLP, SwiGLUMLP, _silu), (NewGELUActivation, FusedNewGELU, None)],
    "recompute": [(DecoderLayer, RecomputingDecoderLayer, None)],
    "linear": [(GatedDeltaNet, FlaGatedDeltaNet, None)],
    "decode": [(nn.Linear, Projection, _model_projection), (GroupedQueryAttention, DecodingAttention, _grouped)],
}
KERNEL_CLASSES = {kernel: plain for swaps in MODULE_SWAPS.values() for plain, kernel, _ in swaps}
FLAGS = ("norms", "swiglu", "recompute", "linear", "sparse_blocks", "attention_recompute", "decode")


def find_model(model) -> LlmsysPreTrainedModel | None:
    """The hf-llmsys model inside ``model``: itself, or the base model of a PEFT wrapper (``get_base_model``, a
    tuner's ``model``), of a ``torch.compile`` wrapper (``_orig_mod``) or of DDP / FSDP (``module``); else None."""
    seen = set()
    while model is not None and id(model) not in seen:
        if isinstance(model, LlmsysPreTrainedModel):
            return model
        seen.add(id(model))
        get_base_model = getattr(model, "get_base_model", None)
        if callable(get_base_model):
            model = get_base_model()
            continue
        model = next((getattr(model, name) for name in ("_orig_mod", "module", "model") if hasattr(model, name)), None)
    return None


def _check_options(loss_chunk_size, flags: dict) -> None:
    if loss_chunk_size is not None and (
        isinstance(loss_chunk_size, bool) or not isinstance(loss_chunk_size, int) or loss_chunk_size < 0
    ):
        raise ValueError(
            f"loss_chunk_size must be None (the device's default), 0 (the plain loss) or a positive number of tokens, "
            f"got {loss_chunk_size!r}."
        )
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be True or False, got {value!r}.")


def _layers(model: nn.Module) -> list[DecoderLayer]:
    return [module for module in model.modules() if isinstance(module, DecoderLayer)]


def restore(model: LlmsysPreTrainedModel) -> None:
    """Undo ``apply``: every kernel class back to its plain class, the plain layouts back in the layers."""
    for module in model.modules():
        if type(module) in KERNEL_CLASSES:
            module.__class__ = KERNEL_CLASSES[type(module)]
    for layer in _layers(model):
        if isinstance(layer.layout, BlockKernels):
            layer.layout = layer.layout.plain
    if isinstance(model, ModelKernels):
        model.__class__ = type(model).__bases__[-1]
    model.__dict__.pop(OPTIONS_ATTRIBUTE, None)


def _swap_modules(model: nn.Module, option: str) -> None:
    for parent in model.modules():
        for name, module in parent.named_children():
            for plain, kernel, wanted in MODULE_SWAPS[option]:
                if type(module) is plain and (wanted is None or wanted(module, parent, name)):
                    module.__class__ = kernel


def _swap_layouts(model: nn.Module, recompute: bool) -> None:
    swapped = {}  # one block-kernel layout per layout object: layers that shared one still share one
    for layer in _layers(model):
        if layer.layout.name in SPARSE_KINDS:
            key = id(layer.layout)
            if key not in swapped:
                swapped[key] = with_block_kernel(layer.layout, recompute)
            layer.layout = swapped[key]


def apply(
    model,
    *,
    loss_chunk_size: int | None = None,
    norms: bool = True,
    swiglu: bool = True,
    recompute: bool = True,
    linear: bool = True,
    sparse_blocks: bool = True,
    attention_recompute: bool = False,
    decode: bool = True,
):
    """Put the speed layer on ``model`` (an hf-llmsys model, or a PEFT / compile / DDP wrapper of one) in place and
    return it; see the module docstring for what each option swaps. Values, gradients and generated tokens are the
    plain model's (up to float rounding); the state dict and ``save_pretrained``'s output are unchanged. Another
    model is returned as it is, with a warning (``applied`` is None for it)."""
    flags = dict(norms=norms, swiglu=swiglu, recompute=recompute, linear=linear, sparse_blocks=sparse_blocks,
                 attention_recompute=attention_recompute, decode=decode)  # fmt: skip
    _check_options(loss_chunk_size, flags)
    target = find_model(model)
    if target is None:
        logger.warning(f"hf_llmsys.kernels.apply: {type(model).__name__} is not an hf-llmsys model; nothing applied.")
        return model
    restore(target)
    for option in MODULE_SWAPS:
        if flags[option]:
            _swap_modules(target, option)
    if sparse_blocks:
        _swap_layouts(target, attention_recompute)
    chunked = loss_chunk_size is None or loss_chunk_size > 0
    if mixin_for(type(target)) is not None and (chunked or decode):
        target.__class__ = model_class(type(target))
    target.__dict__[OPTIONS_ATTRIBUTE] = {"loss_chunk_size": loss_chunk_size, "growing_cache": decode, **flags}
    return model


def applied(model) -> dict | None:
    """What ``apply`` put on ``model`` (or the hf-llmsys model inside it), or None (never applied, or not ours).

    Keys: ``options`` (what ``apply`` was given); ``loss_chunk_size`` (tokens per chunk on the model's device now, 0:
    the plain loss); per option of ``MODULE_SWAPS`` a dict {kernel class name: modules swapped} (None when off);
    ``sparse_blocks`` {layout kind: layers with a block kernel} (None when off); ``growing_cache`` (bool)."""
    target = find_model(model)
    if target is None or OPTIONS_ATTRIBUTE not in target.__dict__:
        return None
    options = dict(target.__dict__[OPTIONS_ATTRIBUTE])
    counts = Counter(type(module).__name__ for module in target.modules() if type(module) in KERNEL_CLASSES)
    heads = isinstance(target, ModelKernels)
    device = next(target.parameters()).device
    report = {
        "options": options,
        "loss_chunk_size": chunk_size_for(target, device) if heads else 0,
        "growing_cache": heads and options["growing_cache"],
    }
    for option, swaps in MODULE_SWAPS.items():
        names = [kernel.__name__ for _, kernel, _ in swaps]
        report[option] = {name: counts[name] for name in names if counts[name]} if options[option] else None
    kinds = Counter(layer.layout.name for layer in _layers(target) if isinstance(layer.layout, BlockKernels))
    report["sparse_blocks"] = dict(kinds) if options["sparse_blocks"] else None
    return report
