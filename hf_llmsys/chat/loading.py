"""What ``llmsys chat MODEL`` talks to: a causal LM folder or Hub id, or a PEFT LoRA adapter folder over one.

- a model folder or Hub id: ours (``llmsys_llama``, ``llmsys_gpt3``: ``import hf_llmsys`` registers them), an
  exported one, or any transformers causal LM (``AutoModelForCausalLM``);
- an adapter folder (``adapter_config.json``, what ``llmsys sft --lora_r N`` saves): its base with the adapter on
  it, the tokenizer the adapter folder's, else the base's (the loader every command shares,
  `data.pretrained_sources`).

`resolve_chat_source` checks MODEL and reads everything but the weights (so a bad folder or flag is refused before
any weight is read); `load_chat_model` loads them. The prompt format (`prompt_formats.choose_format`) follows
``prompt_template.json`` when ``llmsys sft`` saved one beside the model, else the tokenizer's chat template. Generation stops at the union of the model's
``generation_config.eos_token_id`` (``llmsys sft`` saves the chat template's end-of-turn there), the tokenizer's EOS
and the format's own stop ids.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..data.pretrained_sources import (
    ADAPTER_CONFIG,
    adapter_base,
    check_source,
    load_causal_lm,
    load_config,
    load_tokenizer,
    local_folder,
    read_source_json,
)
from ..data.prompt_templates import TEMPLATE_FILE
from .prompt_formats import choose_format


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
    check_source(source, "MODEL", needs=("config.json", ADAPTER_CONFIG))
    source = str(folder) if (folder := local_folder(source)) is not None else source  # ~ expanded
    base = adapter_base(source, "MODEL")
    config = load_config(source, "MODEL", trust_remote_code=trust_remote_code)
    check_causal(config, base or source)
    tokenizer = load_tokenizer(source, "MODEL", trust_remote_code=trust_remote_code)
    prompt_format = choose_format(tokenizer, template, read_source_json(source, TEMPLATE_FILE), source=source)
    return ChatSource(source, tokenizer, prompt_format, config, base, trust_remote_code)


def load_chat_model(resolved: ChatSource, device: str = "auto") -> ChatModel:
    """The model of a resolved MODEL on `device` (``auto``: the GPU when there is one), in eval mode."""
    from ..evaluation.model_limits import model_context_length

    source, base, target = resolved.source, resolved.base, resolve_device(device)
    model = load_causal_lm(source, "MODEL", trust_remote_code=resolved.trust_remote_code)
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
