"""Tab 4, generation: one prompt through the chosen models with greedy, sampling or beam search (transformers'
``generate``), the length penalty of transformers or GNMT (Wu et al. 2016: ``custom_generate=beam_search,
length_penalty_type="gnmt"``, ``hf_llmsys/generation/gnmt_beam_search.py``, which runs on any transformers model).

Decoding strategies are a registry ``STRATEGIES`` (name -> generate keyword arguments from ``DecodingOptions``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import torch

from ..generation import beam_search
from .limits import LimitError, Limits
from .token_text import visible_whitespace

LENGTH_PENALTY_TYPES = ("transformers", "gnmt")


@dataclass(frozen=True)
class DecodingOptions:
    """What the user picked (validated against the Limits by ``check``)."""

    strategy: str = "greedy"
    max_new_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 0.95
    num_beams: int = 4
    length_penalty: float = 1.0
    length_penalty_type: str = "transformers"
    seed: int = 0


STRATEGIES: dict[str, Callable[[DecodingOptions], dict]] = {
    "greedy": lambda o: {"do_sample": False, "num_beams": 1},
    "sampling": lambda o: {"do_sample": True, "temperature": o.temperature, "top_p": o.top_p, "top_k": 0},
    "beam search": lambda o: {"do_sample": False, "num_beams": o.num_beams, "length_penalty": o.length_penalty,
                              "early_stopping": True},
}  # fmt: skip


@dataclass
class GenerationModel:
    """A model offered in the tab; ``seq2seq`` models take the prompt as encoder input."""

    name: str
    model: torch.nn.Module
    tokenizer: object
    seq2seq: bool = False
    chat: bool = False  # apply the tokenizer's chat template (instruction-tuned models)


def check_options(options: DecodingOptions, limits: Limits) -> DecodingOptions:
    """Bounded max_new_tokens and beams, a known strategy and length penalty type."""
    if options.strategy not in STRATEGIES:
        raise LimitError(f"strategy: {options.strategy!r} is unknown; choose one of {sorted(STRATEGIES)}.")
    if options.length_penalty_type not in LENGTH_PENALTY_TYPES:
        raise LimitError(f"length penalty type: choose one of {list(LENGTH_PENALTY_TYPES)}.")
    limits.check_int(options.max_new_tokens, "max new tokens", 1, limits.max_new_tokens)
    limits.check_int(options.num_beams, "beams", 1, limits.max_beams)
    if not 0.05 <= options.temperature <= 5 or not 0.05 <= options.top_p <= 1:
        raise LimitError("sampling: temperature must be in 0.05 .. 5 and top-p in 0.05 .. 1.")
    return options


def generate_kwargs(entry: GenerationModel, options: DecodingOptions) -> dict:
    """generate() keyword arguments for this model; beam search with GNMT's penalty runs hf-llmsys' loop as
    ``custom_generate`` (any transformers model)."""
    kwargs = {"max_new_tokens": int(options.max_new_tokens), **STRATEGIES[options.strategy](options)}
    if options.strategy == "beam search" and options.length_penalty_type == "gnmt":
        kwargs.update(custom_generate=beam_search, length_penalty_type="gnmt")
    return kwargs


@torch.no_grad()
def generate_one(entry: GenerationModel, prompt: str, options: DecodingOptions, limits: Limits) -> dict:
    """The continuation of ``prompt`` by one model (whitespace-only text made visible: ``⏎×24``), with the number
    of prompt and new tokens."""
    tokenizer = entry.tokenizer
    if entry.chat and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True)["input_ids"]  # fmt: skip
    else:
        ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=entry.seq2seq)["input_ids"]
    limits.check_tokens(ids.shape[1], f"prompt ({entry.name}'s tokenizer)")
    if ids.shape[1] == 0:
        raise LimitError(f"prompt: {entry.name}'s tokenizer makes no tokens of it; type some text.")
    torch.manual_seed(int(options.seed))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out = entry.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), pad_token_id=pad,
                               **generate_kwargs(entry, options))  # fmt: skip
    new = out[0] if entry.seq2seq else out[0, ids.shape[1] :]
    return {"model": entry.name, "prompt tokens": ids.shape[1], "new tokens": int((new != pad).sum()),
            "output": visible_whitespace(tokenizer.decode(new, skip_special_tokens=True))}  # fmt: skip


def generate_all(entries: list[GenerationModel], prompt: str, options: DecodingOptions, limits: Limits) -> pd.DataFrame:
    """One row per chosen model: the outputs side by side."""
    limits.check_text(prompt, "prompt")
    check_options(options, limits)
    if not entries:
        raise LimitError("models: choose at least one model.")
    return pd.DataFrame([generate_one(entry, prompt, options, limits) for entry in entries])
