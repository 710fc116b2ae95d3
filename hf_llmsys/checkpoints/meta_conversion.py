"""Convert a Meta-layout LLaMA checkpoint (``params.json`` + ``consolidated.*.pth``) into an hf-llmsys folder.

Input folder (as Meta's download script lays it out):

- ``params.json``: ``dim``, ``n_layers``, ``n_heads``, ``n_kv_heads`` (optional, default ``n_heads``),
  ``vocab_size`` (``-1`` = read it from ``tok_embeddings``), ``multiple_of``, ``ffn_dim_multiplier``, ``norm_eps``,
  ``rope_theta`` (optional, default 10000), ``use_scaled_rope`` (Llama 3.1+: llama3 frequency scaling, factor
  ``rope_scaling_factor`` or 8), ``max_seq_len`` (optional);
- ``consolidated.00.pth`` [, ``consolidated.01.pth``, ...]: one file per model-parallel rank. Meta shards
  column-parallel weights (``wq``, ``wk``, ``wv``, ``w1``, ``w3``, ``output``) along dim 0, row-parallel ones
  (``wo``, ``w2``) along dim 1, ``tok_embeddings`` along dim 1 (LLaMA 1/2 ``ParallelEmbedding``; LLaMA 3's
  ``VocabParallelEmbedding`` splits dim 0 and is recognised from the shard shapes), and replicates the norms;
- ``tokenizer.model`` (optional): copied as is.

Output: ``config.json`` (model_type ``llmsys_llama``), ``model.safetensors`` (transformers-Llama key names, written by
the model's own crash-safe ``save_pretrained``), ``generation_config.json`` and ``tokenizer.model`` if present, so
``AutoModelForCausalLM.from_pretrained(out)`` loads it after ``import hf_llmsys``.

RoPE layout (``--rope-layout``):

- ``interleaved`` (default): Meta's weights are kept bit for bit and the config sets ``rope_interleaved=True`` so the
  model rotates adjacent feature pairs exactly like Meta's ``apply_rotary_emb``.
- ``half``: the ``wq``/``wk`` rows are permuted like transformers' ``convert_llama_weights_to_hf.py``
  (``permute(w, n_heads, dim1, dim2)``) and ``rope_interleaved=False``: the checkpoint is then a plain
  transformers-Llama layout (its safetensors also load into ``transformers.LlamaForCausalLM``).

Both layouts give the same logits as Meta's reference model.

Use ``convert_meta_checkpoint(input_dir, output_dir, rope_layout=...)``, or its CLI
``python scripts/convert_meta_llama.py --input-dir llama-2-7b --output-dir llama-2-7b-llmsys``.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import GenerationConfig

from ..models.configuration_decoder import llama_intermediate_size
from ..models.configuration_llmsys_llama import LlmsysLlamaConfig
from ..models.modeling_llmsys_llama import LlmsysLlamaForCausalLM
from ..models.rotary import RotaryEmbedding

logger = logging.getLogger(__name__)

ROPE_LAYOUTS = ("interleaved", "half")
DTYPES = {"auto": None, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SHARD_PATTERN = re.compile(r"^consolidated\.(\d+)\.pth$")
# Keys a Meta checkpoint may hold that carry no weights (LLaMA 1 stores its RoPE table as ``rope.freqs``).
IGNORED_KEYS = frozenset({"rope.freqs"})
# Parameters of Meta's ModelArgs the converter understands; anything else in params.json is logged and ignored.
KNOWN_PARAMS = frozenset(
    {
        "dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "multiple_of", "ffn_dim_multiplier", "norm_eps",
        "rope_theta", "use_scaled_rope", "rope_scaling_factor", "max_seq_len", "max_batch_size",
    }
)  # fmt: skip
# Llama 3.1's ``apply_scaling`` constants (Meta's llama3 / llama-models reference).
LLAMA3_ROPE_SCALING = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 8192}  # fmt: skip
LLAMA31_MAX_POSITION_EMBEDDINGS = 131072
DEFAULT_MAX_POSITION_EMBEDDINGS = 2048


class ConversionError(ValueError):
    """The input checkpoint or the output folder is not what the converter needs."""


# --------------------------------------------------------------------------------------------------------------------
# Sharding layout of Meta's model-parallel checkpoints
# --------------------------------------------------------------------------------------------------------------------
def shard_dim(key: str) -> int | None:
    """Dimension along which Meta's model parallelism splits ``key`` (None: replicated on every rank)."""
    if key.endswith(("attention.wq.weight", "attention.wk.weight", "attention.wv.weight")):
        return 0  # ColumnParallelLinear
    if key.endswith(("feed_forward.w1.weight", "feed_forward.w3.weight")) or key == "output.weight":
        return 0  # ColumnParallelLinear
    if key.endswith(("attention.wo.weight", "feed_forward.w2.weight")):
        return 1  # RowParallelLinear
    if key == "tok_embeddings.weight":
        return 1  # ParallelEmbedding (LLaMA 1/2); VocabParallelEmbedding (LLaMA 3) is detected in merge_shards
    return None  # norms (and rope.freqs)


def merge_shards(shards: list[dict[str, torch.Tensor]], shard_names: list[str], dim: int) -> dict[str, torch.Tensor]:
    """Concatenate model-parallel shards back into full tensors (replicated tensors: taken from rank 0)."""
    if len(shards) == 1:
        return dict(shards[0])
    reference_keys = set(shards[0])
    for name, shard in zip(shard_names[1:], shards[1:], strict=True):
        if set(shard) != reference_keys:
            missing, extra = sorted(reference_keys - set(shard)), sorted(set(shard) - reference_keys)
            raise ConversionError(
                f"shard {name} does not hold the same keys as {shard_names[0]}: missing {_preview(missing)}, "
                f"extra {_preview(extra)}."
            )
    merged = {}
    for key in shards[0]:
        pieces = [shard[key] for shard in shards]
        shapes = [tuple(piece.shape) for piece in pieces]
        axis = shard_dim(key)
        if key == "tok_embeddings.weight" and pieces[0].dim() == 2 and pieces[0].shape[1] == dim:
            axis = 0  # full hidden size on each rank: vocabulary-parallel embedding (LLaMA 3)
        if axis is not None and axis >= pieces[0].dim():
            raise ConversionError(
                f"{key}: expected a matrix split along dim {axis} over {len(shards)} shards, got shard shape "
                f"{shapes[0]}."
            )
        # the split dimension may differ by rank (uneven split); every other dimension must agree
        comparable = {shape[:axis] + shape[axis + 1 :] if axis is not None else shape for shape in shapes}
        if len(comparable) != 1 or len({len(shape) for shape in shapes}) != 1:
            described = ", ".join(f"{name}: {shape}" for name, shape in zip(shard_names, shapes, strict=True))
            raise ConversionError(f"{key}: model-parallel shards have incompatible shapes ({described}).")
        if axis is None:
            if not all(torch.equal(pieces[0], piece) for piece in pieces[1:]):
                logger.warning("%s is replicated across shards but differs between them; using rank 0's copy.", key)
            merged[key] = pieces[0]
        else:
            merged[key] = torch.cat(pieces, dim=axis)
    return merged


# --------------------------------------------------------------------------------------------------------------------
# RoPE layouts
# --------------------------------------------------------------------------------------------------------------------
def permute_for_rotate_half(w: torch.Tensor, n_heads: int, dim1: int, dim2: int) -> torch.Tensor:
    """transformers' ``convert_llama_weights_to_hf.permute``: per head, rows (0, 1, 2, 3, ...) of adjacent RoPE
    pairs become (0, 2, 4, ..., 1, 3, 5, ...) so that pair i is (i, i + D/2), the ``rotate_half`` convention."""
    return w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)


# --------------------------------------------------------------------------------------------------------------------
# Reading and checking the input
# --------------------------------------------------------------------------------------------------------------------
def _preview(names: Sequence[str], limit: int = 20) -> str:
    names = list(names)
    if not names:
        return "[]"
    more = f", ... ({len(names) - limit} more)" if len(names) > limit else ""
    return f"[{', '.join(names[:limit])}{more}]"


def find_shards(input_dir: Path) -> list[Path]:
    """``consolidated.NN.pth`` files ordered by rank; ranks must be 0..n-1 without gaps."""
    ranked = sorted(
        (int(match.group(1)), path)
        for path in input_dir.iterdir()
        if path.is_file() and (match := SHARD_PATTERN.match(path.name))
    )
    if not ranked:
        raise ConversionError(
            f"no consolidated.*.pth checkpoint in {str(input_dir)!r}: a Meta checkpoint folder holds "
            f"consolidated.00.pth (and consolidated.01.pth, ... for model-parallel shards)."
        )
    ranks = [rank for rank, _ in ranked]
    if ranks != list(range(len(ranks))):
        raise ConversionError(
            f"model-parallel shards in {str(input_dir)!r} are not numbered 0..{len(ranks) - 1}: found "
            f"{[path.name for _, path in ranked]} (a shard is missing?)."
        )
    return [path for _, path in ranked]


def read_params(input_dir: Path) -> dict:
    path = input_dir / "params.json"
    if not path.is_file():
        raise ConversionError(
            f"missing params.json in {str(input_dir)!r}: a Meta checkpoint folder holds params.json (dim, n_layers, "
            f"n_heads, ...) beside consolidated.00.pth."
        )
    try:
        params = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ConversionError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(params, dict):
        raise ConversionError(f"{path} must hold a JSON object, got {type(params).__name__}.")
    for required in ("dim", "n_layers", "n_heads"):
        if required not in params:
            raise ConversionError(f"params.json lacks {required!r} (found keys {sorted(params)}).")
    unknown = sorted(set(params) - KNOWN_PARAMS)
    if unknown:
        logger.warning("params.json keys ignored by the converter: %s", unknown)
    return params


def load_checkpoint(shard_paths: list[Path]) -> list[dict[str, torch.Tensor]]:
    shards = []
    for path in shard_paths:
        try:
            shard = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:  # legacy (non-zip) serialisation cannot be memory-mapped
            shard = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(shard, dict):
            raise ConversionError(f"{path.name} does not hold a state dict (got {type(shard).__name__}).")
        shards.append(shard)
    return shards


def expected_meta_shapes(sizes: dict) -> dict[str, tuple[int, ...]]:
    """Full (merged) shape of every Meta checkpoint tensor for the sizes in ``params.json``."""
    dim, vocab, inter = sizes["dim"], sizes["vocab_size"], sizes["intermediate_size"]
    q_rows, kv_rows = sizes["n_heads"] * sizes["head_dim"], sizes["n_kv_heads"] * sizes["head_dim"]
    shapes = {"tok_embeddings.weight": (vocab, dim), "norm.weight": (dim,), "output.weight": (vocab, dim)}
    for i in range(sizes["n_layers"]):
        prefix = f"layers.{i}."
        shapes[prefix + "attention.wq.weight"] = (q_rows, dim)
        shapes[prefix + "attention.wk.weight"] = (kv_rows, dim)
        shapes[prefix + "attention.wv.weight"] = (kv_rows, dim)
        shapes[prefix + "attention.wo.weight"] = (dim, q_rows)
        shapes[prefix + "feed_forward.w1.weight"] = (inter, dim)
        shapes[prefix + "feed_forward.w3.weight"] = (inter, dim)
        shapes[prefix + "feed_forward.w2.weight"] = (dim, inter)
        shapes[prefix + "attention_norm.weight"] = (dim,)
        shapes[prefix + "ffn_norm.weight"] = (dim,)
    return shapes


def check_keys_and_shapes(state: dict[str, torch.Tensor], expected: dict[str, tuple[int, ...]]) -> None:
    found = set(state) - IGNORED_KEYS
    missing, unexpected = sorted(set(expected) - found), sorted(found - set(expected))
    if missing or unexpected:
        problems = []
        if missing:
            problems.append(f"missing keys {_preview(missing)}")
        if unexpected:
            problems.append(f"unexpected keys {_preview(unexpected)}")
        raise ConversionError(
            f"checkpoint keys do not match params.json (n_layers={_count_layers(expected)}): "
            + "; ".join(problems)
            + "."
        )
    for key, shape in expected.items():
        actual = tuple(state[key].shape)
        if actual != shape:
            raise ConversionError(
                f"{key}: shape mismatch: expected {shape} from params.json, got {actual} in the checkpoint."
            )


def _count_layers(expected: dict) -> int:
    return sum(1 for key in expected if key.endswith("attention.wq.weight"))


def model_sizes(params: dict, embedding_rows: int | None, vocab_size: int | None) -> dict:
    """Every size the converter checks against, from params.json (and the embedding when vocab_size is -1)."""
    dim, n_heads = int(params["dim"]), int(params["n_heads"])
    n_kv_heads = params.get("n_kv_heads") or n_heads
    if dim % n_heads:
        raise ConversionError(f"params.json: dim ({dim}) must be divisible by n_heads ({n_heads}).")
    if vocab_size is None:
        vocab_size = params.get("vocab_size", -1)
        if vocab_size is None or vocab_size <= 0:
            if embedding_rows is None:
                raise ConversionError(
                    "params.json has vocab_size -1 and the checkpoint has no tok_embeddings.weight to read it from; "
                    "pass --vocab-size."
                )
            vocab_size = embedding_rows
    multiple_of = int(params.get("multiple_of", 256))
    ffn_dim_multiplier = params.get("ffn_dim_multiplier")
    return {
        "dim": dim,
        "n_layers": int(params["n_layers"]),
        "n_heads": n_heads,
        "n_kv_heads": int(n_kv_heads),
        "head_dim": dim // n_heads,
        "vocab_size": int(vocab_size),
        "multiple_of": multiple_of,
        "ffn_dim_multiplier": ffn_dim_multiplier,
        "intermediate_size": llama_intermediate_size(dim, multiple_of, ffn_dim_multiplier),
    }


def rope_parameters(params: dict) -> dict:
    theta = float(params.get("rope_theta", 10000.0))
    if not params.get("use_scaled_rope", False):
        return {"rope_type": "default", "rope_theta": theta}
    scaling = dict(LLAMA3_ROPE_SCALING)
    if params.get("rope_scaling_factor") is not None:  # llama-models (Llama 3.2 1B/3B use 32)
        scaling["factor"] = float(params["rope_scaling_factor"])
    return {"rope_type": "llama3", "rope_theta": theta, **scaling}


# --------------------------------------------------------------------------------------------------------------------
# Building the hf-llmsys model
# --------------------------------------------------------------------------------------------------------------------
def to_llmsys_state_dict(state: dict[str, torch.Tensor], sizes: dict, rope_layout: str) -> dict[str, torch.Tensor]:
    """Meta key names -> LlmsysLlamaForCausalLM parameter names (transformers' Llama names)."""
    dim, n_heads, n_kv_heads = sizes["dim"], sizes["n_heads"], sizes["n_kv_heads"]
    q_rows, kv_rows = n_heads * sizes["head_dim"], n_kv_heads * sizes["head_dim"]
    out = {
        "model.embed_tokens.weight": state["tok_embeddings.weight"],
        "model.norm.weight": state["norm.weight"],
        "lm_head.weight": state["output.weight"],
    }
    for i in range(sizes["n_layers"]):
        src, dst = f"layers.{i}.", f"model.layers.{i}."
        wq, wk = state[src + "attention.wq.weight"], state[src + "attention.wk.weight"]
        if rope_layout == "half":
            wq = permute_for_rotate_half(wq, n_heads, q_rows, dim)
            wk = permute_for_rotate_half(wk, n_kv_heads, kv_rows, dim)
        out[dst + "self_attn.q_proj.weight"] = wq
        out[dst + "self_attn.k_proj.weight"] = wk
        out[dst + "self_attn.v_proj.weight"] = state[src + "attention.wv.weight"]
        out[dst + "self_attn.o_proj.weight"] = state[src + "attention.wo.weight"]
        out[dst + "mlp.gate_proj.weight"] = state[src + "feed_forward.w1.weight"]
        out[dst + "mlp.up_proj.weight"] = state[src + "feed_forward.w3.weight"]
        out[dst + "mlp.down_proj.weight"] = state[src + "feed_forward.w2.weight"]
        out[dst + "input_layernorm.weight"] = state[src + "attention_norm.weight"]
        out[dst + "post_attention_layernorm.weight"] = state[src + "ffn_norm.weight"]
    return {key: tensor.contiguous() for key, tensor in out.items()}


def build_model(config, state_dict: dict[str, torch.Tensor]):
    """Instantiate the model without allocating (meta device) and adopt the converted tensors as parameters."""
    with torch.device("meta"):
        model = LlmsysLlamaForCausalLM(config)
    result = model.load_state_dict(state_dict, strict=False, assign=True)
    if result.missing_keys or result.unexpected_keys:  # a bug in this converter, not in the checkpoint
        raise RuntimeError(
            f"internal error: converted state dict does not fit LlmsysLlamaForCausalLM: missing "
            f"{_preview(result.missing_keys)}, unexpected {_preview(result.unexpected_keys)}."
        )
    for module in model.modules():  # non-persistent RoPE buffers were created on the meta device
        if isinstance(module, RotaryEmbedding):
            module.materialize_buffers(device="cpu")
    leftover = [name for name, tensor in [*model.named_parameters(), *model.named_buffers()] if tensor.is_meta]
    if leftover:
        raise RuntimeError(f"internal error: tensors left on the meta device: {_preview(leftover)}.")
    return model.eval()


# --------------------------------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------------------------------
def convert_meta_checkpoint(
    input_dir: str | Path,
    output_dir: str | Path,
    rope_layout: str = "interleaved",
    *,
    vocab_size: int | None = None,
    max_position_embeddings: int | None = None,
    bos_id: int = 1,
    eos_id: int = 2,
    dtype: str | torch.dtype | None = "auto",
    overwrite: bool = False,
) -> Path:
    """Convert Meta's ``params.json`` + ``consolidated.*.pth`` in ``input_dir`` into an hf-llmsys folder.

    rope_layout: ``"interleaved"`` keeps Meta's q/k rows (``rope_interleaved=True``); ``"half"`` permutes them into
    transformers' ``rotate_half`` layout (``rope_interleaved=False``). vocab_size overrides params.json's (needed
    only when params.json says -1 and the embedding cannot tell). max_position_embeddings defaults to params.json's
    ``max_seq_len``, else 131072 for Llama 3.1 scaled RoPE, else 2048. dtype: ``"auto"`` keeps the checkpoint's
    dtype, or ``"float32"`` / ``"bfloat16"`` / ``"float16"`` (or a torch dtype). Returns the output folder.

    Raises ``ConversionError`` for a missing params.json or checkpoint, mismatched keys or shapes, or an output
    folder that already holds a model (config.json) unless ``overwrite``.
    """
    input_dir, output_dir = Path(input_dir), Path(output_dir)
    if rope_layout not in ROPE_LAYOUTS:
        raise ConversionError(f"rope_layout={rope_layout!r} is unknown; choose one of {list(ROPE_LAYOUTS)}.")
    if isinstance(dtype, str) or dtype is None:
        if (dtype or "auto") not in DTYPES:
            raise ConversionError(f"dtype={dtype!r} is unknown; choose one of {list(DTYPES)}.")
        dtype = DTYPES[dtype or "auto"]
    if not input_dir.is_dir():
        raise ConversionError(f"input folder {str(input_dir)!r} does not exist.")
    params = read_params(input_dir)
    shard_paths = find_shards(input_dir)
    if output_dir.is_file():
        raise ConversionError(f"output path {str(output_dir)!r} is a file; give a folder.")
    if (output_dir / "config.json").exists() and not overwrite:
        raise ConversionError(
            f"output folder {str(output_dir)!r} already holds a model (config.json); pass --overwrite "
            f"(overwrite=True) to replace it."
        )

    shards = load_checkpoint(shard_paths)
    state = merge_shards(shards, [path.name for path in shard_paths], int(params["dim"]))
    del shards
    embedding = state.get("tok_embeddings.weight")
    sizes = model_sizes(params, embedding.shape[0] if embedding is not None and embedding.dim() == 2 else None,
                        vocab_size)  # fmt: skip
    check_keys_and_shapes(state, expected_meta_shapes(sizes))

    float_dtypes = {t.dtype for k, t in state.items() if k not in IGNORED_KEYS and t.is_floating_point()}
    if dtype is None:
        dtype = float_dtypes.pop() if len(float_dtypes) == 1 else torch.float32
    state = {key: tensor.to(dtype) for key, tensor in state.items() if key not in IGNORED_KEYS}

    if max_position_embeddings is None:
        max_position_embeddings = params.get("max_seq_len") or (
            LLAMA31_MAX_POSITION_EMBEDDINGS if params.get("use_scaled_rope") else DEFAULT_MAX_POSITION_EMBEDDINGS
        )
    config = LlmsysLlamaConfig(
        vocab_size=sizes["vocab_size"],
        hidden_size=sizes["dim"],
        intermediate_size=sizes["intermediate_size"],
        multiple_of=sizes["multiple_of"],
        ffn_dim_multiplier=sizes["ffn_dim_multiplier"],
        num_hidden_layers=sizes["n_layers"],
        num_attention_heads=sizes["n_heads"],
        num_key_value_heads=sizes["n_kv_heads"],
        head_dim=sizes["head_dim"],
        rms_norm_eps=float(params.get("norm_eps", 1e-5)),
        max_position_embeddings=int(max_position_embeddings),
        rope_parameters=rope_parameters(params),
        rope_interleaved=rope_layout == "interleaved",
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        tie_word_embeddings=False,
    )
    config.dtype = dtype

    model = build_model(config, to_llmsys_state_dict(state, sizes, rope_layout))
    del state
    model.generation_config = GenerationConfig(bos_token_id=bos_id, eos_token_id=eos_id)
    model.save_pretrained(output_dir)  # crash-safe: config.json is moved in last
    tokenizer = input_dir / "tokenizer.model"
    if tokenizer.is_file():
        shutil.copyfile(tokenizer, output_dir / "tokenizer.model")
    logger.info(
        "converted %s (%d shard(s), %d layers, rope layout %s, %s) -> %s",
        input_dir, len(shard_paths), sizes["n_layers"], rope_layout, str(dtype).replace("torch.", ""), output_dir,
    )  # fmt: skip
    return output_dir
