"""hf-llmsys's speed layer: memory-saving autograd functions, sub-quadratic layout kernels and decode fast paths,
put on a model instance from outside (``apply``), as Liger's ``apply_liger_kernel_to_llama`` patches an instance.

The model code (``hf_llmsys/models/``) is the plain reference, transformers' Llama in shape; nothing here is saved
with a checkpoint. ``apply(model, ...)`` swaps classes of the model's modules (and of the model) for subclasses
defined here, tested equal to the plain ones (tests/test_kernels.py); ``applied(model)`` says what is on. Training
jobs, benchmarks and the demo also import the loss and attention functions below from here.

    from hf_llmsys import LlmsysLlamaForCausalLM
    from hf_llmsys import kernels

    model = kernels.apply(LlmsysLlamaForCausalLM.from_pretrained(path))  # chunked loss at the device's default
    kernels.applied(model)["norms"]  # {'KernelRMSNorm': ...}
"""

from .chunked_cross_entropy import (
    ACCELERATOR_CHUNK_SIZE,
    COMPILED_CHUNKED_LOSS_DEVICES,
    DEFAULT_CHUNK_SIZE,
    chunked_linear_cross_entropy,
    default_chunk_size,
    shift_labels,
)
from .growing_cache import GrowingCache
from .layout_kernels import sparse_attention
from .patching import applied, apply, restore

__all__ = [
    "ACCELERATOR_CHUNK_SIZE",
    "COMPILED_CHUNKED_LOSS_DEVICES",
    "DEFAULT_CHUNK_SIZE",
    "GrowingCache",
    "applied",
    "apply",
    "chunked_linear_cross_entropy",
    "default_chunk_size",
    "restore",
    "shift_labels",
    "sparse_attention",
]
