"""Export a decoder of ours to one GGUF file for llama.cpp (``llmsys export --format gguf``).

The architecture follows from the config (`gguf_architecture`): RMSNorm / SwiGLU / RoPE decoders are llama.cpp's
``llama`` (``gguf_llama.py``), dense LayerNorm / GELU / learned-position ones (``llmsys_gpt3``) its ``gpt2``
(``gguf_gpt2.py``). Each architecture module states what llama.cpp computes for it and refuses, in one line naming
the feature, a config it does not express; ``llmsys_t5`` (an encoder-decoder) is refused for both.

Types (``--dtype``):

- ``f32``, ``f16``, ``bf16``, ``q8_0`` are written here with gguf's ``quants.quantize``: 1-D tensors (norms, biases)
  stay F32, every matrix (the embeddings and output included) takes the type; a matrix whose rows are not a multiple
  of Q8_0's 32-value block falls back to F16, as llama.cpp's converter does;
- ``q6_K``, ``q5_K_M``, ``q4_K_M`` (llama.cpp's k-quants, the "_M" mixes keeping some tensors at a higher type) are
  made by llama.cpp's own quantiser, ``llama_model_quantize`` through ``llama-cpp-python``, from the f32 file
  written first (``llama.cpp`` ``tools/quantize`` does the same from a converter's f32 / f16 output). Without
  ``llama-cpp-python`` they are refused in one line naming the install, before anything is read.

Shapes: torch stores a linear weight as [out, in]; GGUF lists dimensions fastest first, so the same bytes read as
{in, out} there (the writer reverses the order itself).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import gguf
import torch

from .gguf_gpt2 import gpt2_gguf_refusal, gpt2_tensors, write_gpt2_hparams
from .gguf_llama import llama_gguf_refusal, llama_tensors, write_llama_hparams
from .gguf_tokenizer import write_tokenizer
from .gguf_types import GGUF_DTYPES, LLAMA_CPP_TYPES
from .llama_cpp_quantize import check_llama_cpp, quantize_with_llama_cpp
from .sources import staged_output
from .transformers_targets import linear_layers

DTYPES = {  # --dtype written here (gguf_types.WRITTEN_TYPES) -> (file type, tensor type for matrices)
    "f32": (gguf.LlamaFileType.ALL_F32, gguf.GGMLQuantizationType.F32),
    "f16": (gguf.LlamaFileType.MOSTLY_F16, gguf.GGMLQuantizationType.F16),
    "bf16": (gguf.LlamaFileType.MOSTLY_BF16, gguf.GGMLQuantizationType.BF16),
    "q8_0": (gguf.LlamaFileType.MOSTLY_Q8_0, gguf.GGMLQuantizationType.Q8_0),
}


@dataclass(frozen=True)
class GgufArchitecture:
    """One llama.cpp architecture: its name, why a config is not it, its ``{arch}.*`` keys and its tensors."""

    arch: gguf.MODEL_ARCH
    refusal: Callable[[object], str | None]
    write_hparams: Callable[[gguf.GGUFWriter, object], None]
    tensors: Callable[[object], Iterator[tuple[str, torch.Tensor]]]

    @property
    def name(self) -> str:
        return gguf.MODEL_ARCH_NAMES[self.arch]


ARCHITECTURES = {
    "llama": GgufArchitecture(gguf.MODEL_ARCH.LLAMA, llama_gguf_refusal, write_llama_hparams, llama_tensors),
    "gpt2": GgufArchitecture(gguf.MODEL_ARCH.GPT2, gpt2_gguf_refusal, write_gpt2_hparams, gpt2_tensors),
}


def export_gguf(model, tokenizer, out: Path, dtype: str = "f32") -> Path:
    """Write ``model`` and ``tokenizer`` as the GGUF file ``out`` (``*.gguf``); return ``out``.

    The file appears in one rename of a finished temporary file beside it (``sources.staged_output``): nothing is
    left half-written, and an existing ``out`` is replaced only once the new file is complete.
    """
    out = Path(out)
    if out.suffix != ".gguf":
        raise ValueError(f"out: {out} must be a file path ending in .gguf")
    check_gguf_dtype(dtype)
    architecture = gguf_architecture(model.config)
    if tokenizer is None:
        raise ValueError("tokenizer: a GGUF carries its tokenizer; the source folder has none (save one beside it)")
    with staged_output(out, overwrite=True, file=True) as staging:
        if dtype in LLAMA_CPP_TYPES:
            f32 = staging.with_name(f"f32-{staging.name}")
            _write(architecture, model, tokenizer, f32, "f32")
            quantize_with_llama_cpp(f32, staging, dtype)
            f32.unlink()
        else:
            _write(architecture, model, tokenizer, staging, dtype)
    return out


def check_gguf_dtype(dtype: str) -> None:
    """ValueError for a type not written at all, or one that needs llama-cpp-python when it is not installed."""
    if dtype not in GGUF_DTYPES:
        raise ValueError(f"--dtype {dtype!r} is not a GGUF type written here; choose one of {', '.join(GGUF_DTYPES)}")
    if dtype in LLAMA_CPP_TYPES:
        check_llama_cpp(dtype)


def gguf_architecture(config) -> GgufArchitecture:
    """The llama.cpp architecture that computes what ``config`` computes; ValueError naming the feature when none.

    Learned positions point at ``gpt2``, RoPE at ``llama``, other positions by the norm (LayerNorm: ``gpt2``); the
    refusal names that architecture's first difference.
    """
    model_type = getattr(config, "model_type", None)
    if getattr(config, "is_encoder_decoder", False):
        raise ValueError(f"cannot export to GGUF: {model_type} is an encoder-decoder model; llama.cpp's llama and gpt2 "
                         "architectures written here are decoders only")  # fmt: skip
    if not hasattr(config, "layer_layouts"):
        raise ValueError(f"cannot export to GGUF: model_type {model_type!r} is not an hf-llmsys decoder (llmsys_llama, "
                         "llmsys_gpt3)")  # fmt: skip
    if linear := linear_layers(config):  # llama.cpp's llama and gpt2 attend in every layer
        raise ValueError(f"cannot export to GGUF: layers {linear} are linear (Gated DeltaNet) layers, which llama.cpp's "
                         "llama and gpt2 architectures do not have; keep the folder (transformers format)")  # fmt: skip
    position = config.position_embedding_type
    gpt2_like = position == "learned" or (position != "rope" and config.norm_type == "layernorm")
    architecture = ARCHITECTURES["gpt2" if gpt2_like else "llama"]
    refusal = architecture.refusal(config)
    if refusal:
        raise ValueError(f"cannot export to GGUF (llama.cpp's {architecture.name} architecture): {refusal}")
    return architecture


def _write(architecture: GgufArchitecture, model, tokenizer, path: Path, dtype: str) -> None:
    """One GGUF file of ``model`` in a type written here (f32 / f16 / bf16 / q8_0)."""
    file_type, matrix_type = DTYPES[dtype]
    writer = gguf.GGUFWriter(path, architecture.name)
    architecture.write_hparams(writer, model.config)
    writer.add_file_type(file_type)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    write_tokenizer(writer, tokenizer, model, model.config.vocab_size)
    for name, weight in architecture.tensors(model):
        data, qtype = _typed(weight, matrix_type)
        writer.add_tensor(name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _typed(weight: torch.Tensor, matrix_type: gguf.GGMLQuantizationType):
    """(data, raw_dtype=type): 1-D tensors F32, matrices ``matrix_type`` (F16 where Q8_0's blocks do not fit)."""
    data = weight.to(torch.float32).numpy()
    qtype = gguf.GGMLQuantizationType.F32 if data.ndim <= 1 else matrix_type
    try:
        return gguf.quants.quantize(data, qtype), qtype
    except gguf.QuantError:
        return gguf.quants.quantize(data, gguf.GGMLQuantizationType.F16), gguf.GGMLQuantizationType.F16


__all__ = ["ARCHITECTURES", "DTYPES", "GGUF_DTYPES", "export_gguf", "gguf_architecture"]
