"""What ``llmsys chat MODEL`` talks to: a causal LM folder or Hub id, or a PEFT LoRA adapter folder over one.

- a model folder or Hub id: ours (``llmsys_llama``, ``llmsys_gpt3``: ``import hf_llmsys`` registers them), an
  exported one, or any transformers causal LM (``AutoModelForCausalLM``);
- an adapter folder (``adapter_config.json``, what ``llmsys sft --lora_r N`` saves): transformers loads the base named by
  ``base_model_name_or_path`` and puts the adapter on it (its PEFT integration); adapters saved against the fused
  projections of earlier hf-llmsys models are rewritten first (`checkpoints.fused_adapters`); the tokenizer is the
  adapter folder's, else the base's.

`resolve_chat_source` checks MODEL and reads everything but the weights (so a bad folder or flag is refused before
any weight is read); `load_chat_model` loads them. The prompt format (`prompt_formats.choose_format`) follows
``prompt_template.json`` when ``llmsys sft`` saved one beside the model, else the tokenizer's chat template. Generation stops at the union of the model's
``generation_config.eos_token_id`` (``llmsys sft`` saves the chat template's end-of-turn there), the tokenizer's EOS
and the format's own stop ids.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..data.pretrained_sources import TOKENIZER_FILES, check_source
from ..data.prompt_templates import TEMPLATE_FILE
from .prompt_formats import choose_format

ADAPTER_CONFIG = "adapter_config.json"


@dataclass
class ChatSource:
    """What MODEL names, checked and read without its weights: tokenizer, prompt format, config, adapter base."""

    source: str
    tokenizer: object
    prompt_format: object
    config: object
    base: str | None  # the base model of an adapter folder (None: a model folder or Hub id)
    trust_remote_code: bool = False


@dataclass
class ChatModel:
    """A loaded model ready to chat: model (eval mode), tokenizer, prompt format, stop ids and context length."""

    model: object
    tokenizer: object
    prompt_format: object
    stop_ids: list[int]
    context_length: int | None
    description: str


def _local_folder(source: str) -> Path | None:
    path = Path(source).expanduser()
    return path if path.is_dir() else None


def _read_json(source: str, name: str) -> dict | None:
    """A JSON file of the folder or Hub repo `source` (None when it has none)."""
    from transformers.utils import cached_file

    # None for a file the folder / repo lacks, and (as transformers) for an unreachable Hub: AutoConfig says that
    path = cached_file(source, name, _raise_exceptions_for_missing_entries=False)
    if path is None:
        return None
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{source}/{name}: not valid JSON ({err})") from None


def adapter_base(source: str, adapter: dict) -> str:
    """The base model an adapter folder names; ValueError when it names none or a local folder that is gone."""
    base = adapter.get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{source}/{ADAPTER_CONFIG}: names no base model (base_model_name_or_path); set it to the "
                         "folder or Hub id of the model the adapter was trained on")  # fmt: skip
    check_source(base, f"{source}/{ADAPTER_CONFIG} base_model_name_or_path")
    return base


def check_tokenizer_files(source: str, fallback: str | None) -> str:
    """Where the tokenizer comes from: `source`, else `fallback` (an adapter's base); ValueError naming the files."""
    folder = _local_folder(source)
    if folder is None or any((folder / name).is_file() for name in TOKENIZER_FILES):
        return source
    if fallback is not None:
        return fallback
    raise ValueError(
        f"MODEL {source}: the folder has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); save it beside the "
        "model (tokenizer.save_pretrained(folder))"
    )


def check_causal(config, source: str) -> None:
    """Refuse an encoder-decoder before its weights are read."""
    if getattr(config, "is_encoder_decoder", False):
        raise ValueError(f"MODEL {source}: {config.model_type} is an encoder-decoder; llmsys chat talks to causal "
                         "(decoder-only) LMs")  # fmt: skip


def stop_ids(model, tokenizer, prompt_format) -> list[int]:
    """The model's generation_config EOS ids, the tokenizer's EOS and the format's stop ids, in that order."""
    eos = model.generation_config.eos_token_id
    ids = list(eos) if isinstance(eos, (list, tuple)) else [eos]
    ids += [tokenizer.eos_token_id, *prompt_format.stop_ids]
    return list(dict.fromkeys(i for i in ids if i is not None))


def resolve_chat_source(source: str, template: str = "auto", trust_remote_code: bool = False) -> ChatSource:
    """Check MODEL and read its config, tokenizer and prompt format (no weights); ValueError for what to fix."""
    from transformers import AutoConfig, AutoTokenizer

    import hf_llmsys  # noqa: F401  (registers our architectures with the Auto classes)

    check_source(source, "MODEL", needs=("config.json", ADAPTER_CONFIG))
    source = str(folder) if (folder := _local_folder(source)) is not None else source  # ~ expanded
    adapter = _read_json(source, ADAPTER_CONFIG)
    base = adapter_base(source, adapter) if adapter is not None else None
    tokenizer_source = check_tokenizer_files(source, base)
    config = AutoConfig.from_pretrained(base or source, trust_remote_code=trust_remote_code)
    check_causal(config, base or source)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source, trust_remote_code=trust_remote_code)
    prompt_format = choose_format(tokenizer, template, _read_json(source, TEMPLATE_FILE), source=source)
    return ChatSource(source, tokenizer, prompt_format, config, base, trust_remote_code)


def load_chat_model(resolved: ChatSource, device: str = "auto") -> ChatModel:
    """The model of a resolved MODEL on `device` (``auto``: the GPU when there is one), in eval mode."""
    from transformers import AutoModelForCausalLM

    from ..evaluation.model_limits import model_context_length

    source, base, target = resolved.source, resolved.base, resolve_device(device)
    if base is not None and (folder := _local_folder(source)) is not None:
        from ..checkpoints.fused_adapters import upgrade_fused_adapter

        upgrade_fused_adapter(folder)
    model = AutoModelForCausalLM.from_pretrained(source, trust_remote_code=resolved.trust_remote_code)
    model.to(target).eval()
    tokenizer, prompt_format = resolved.tokenizer, resolved.prompt_format
    what = f"LoRA adapter over {base}" if base is not None else resolved.config.model_type
    return ChatModel(
        model, tokenizer, prompt_format, stop_ids(model, tokenizer, prompt_format), model_context_length(model),
        f"{source} ({what}, {model.device}); prompts: {prompt_format.description}",
    )  # fmt: skip


def resolve_device(name: str) -> str:
    """``auto``: the GPU when there is one, else the CPU; ValueError for a device this machine does not have."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    kind, _, index = name.partition(":")
    if kind not in ("cpu", "cuda", "mps") or (index and not index.isdigit()):
        raise ValueError(f"--device {name}: choose auto, cpu, cuda or cuda:N")
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {name}: no CUDA device here; use --device cpu")
    if kind == "cuda" and index and int(index) >= torch.cuda.device_count():
        raise ValueError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"--device {name}: no MPS device here; use --device cpu")
    return name
