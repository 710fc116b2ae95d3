"""``--format transformers``: a folder that transformers loads with its own classes (no remote code, no hf-llmsys).

Steps (``export_transformers``): pick the target from the config's features (``decoder_targets.py``,
``t5_target.py``; ValueError naming the feature when none expresses the model), rewrite our state dict into the
target's names and conventions, build the target class on the meta device (no memory, no init) and load the tensors
into it with ``load_state_dict(strict=True, assign=True)``, so every key and shape is checked against the real
class; a bias the target has and our model lacks is written as zeros (exact). transformers' ``save_pretrained``
then writes ``config.json`` and the safetensors (tied weights stored once, as for its own models); the tokenizer,
``generation_config.json`` (the source's, with the chat template's end-of-turn id among the eos ids) and a model
card naming the source and the target follow.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers
from transformers import AutoConfig, GenerationConfig

from ..architectures import architecture
from .decoder_targets import decoder_target
from .export_card import write_export_card
from .sources import ExportSource
from .t5_target import t5_target
from .transformers_targets import Target


def target_for(config) -> Target:
    """The transformers class that expresses ``config`` exactly (ValueError naming the feature otherwise)."""
    return t5_target(config) if architecture(config.model_type).is_encoder_decoder else decoder_target(config)


def cpu_state_dict(model) -> dict:
    """The model's state dict on the CPU; tensors that share storage (tied weights) stay one tensor."""
    copies: dict[tuple, torch.Tensor] = {}
    state = {}
    for key, tensor in model.state_dict().items():
        identity = (tensor.device, tensor.data_ptr(), tensor.shape, tensor.stride())
        if identity not in copies:
            copies[identity] = tensor.detach().cpu()
        state[key] = copies[identity]
    return state


def complete_state(state: dict, expected: dict[str, torch.Tensor], dtype: torch.dtype) -> dict:
    """Zeros for the biases the target has and ``state`` lacks; a missing weight or any stray key is a bug here."""
    for key, meta in expected.items():
        if key not in state and key.endswith(".bias"):
            state[key] = torch.zeros(meta.shape, dtype=dtype)
    missing, extra = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or extra:
        raise RuntimeError(f"export weight map out of step with the target class: missing {missing}, extra {extra}")
    return state


def build_target_model(target: Target, state: dict, dtype: torch.dtype):
    """The target class holding ``state`` (built on the meta device, tensors assigned, keys and shapes checked)."""
    config = AutoConfig.for_model(target.model_type, **target.config)
    config.dtype = dtype
    model_class = getattr(transformers, target.class_name)
    with torch.device("meta"):
        model = model_class(config)
    state = complete_state(state, model.state_dict(), dtype)
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval()


def export_generation_config(source: ExportSource, target_model) -> GenerationConfig:
    """The source's generation config (else the target's default), eos ids including the chat end-of-turn."""
    generation = source.generation_config or GenerationConfig.from_model_config(target_model.config)
    eos = generation.eos_token_id
    eos_ids = [] if eos is None else list(eos) if isinstance(eos, (list, tuple)) else [eos]
    tokenizer = source.tokenizer
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        from ..data.conversation_labels import ConversationTemplate

        eos_ids += [i for i in ConversationTemplate(tokenizer).stop_token_ids() if i is not None]
    eos_ids = list(dict.fromkeys(eos_ids))
    if eos_ids:
        generation.eos_token_id = eos_ids[0] if len(eos_ids) == 1 else eos_ids
    return generation


def export_transformers(source: ExportSource, out: Path, model_id: str) -> Target:
    """Write ``source`` into the (empty, staged) folder ``out`` as its transformers target; returns the target.
    ``model_id``: what the card's snippet loads (the final folder, or the Hub id it is pushed to)."""
    model = source.model
    target = target_for(model.config)
    dtype = next(model.parameters()).dtype
    state = cpu_state_dict(model)
    target_model = build_target_model(target, target.weights(state, model.config), dtype)
    target_model.save_pretrained(out)
    if source.tokenizer is not None:
        source.tokenizer.save_pretrained(out)
    export_generation_config(source, target_model).save_pretrained(out)
    write_export_card(out, source.name, model.config.model_type, target, model_id)
    return target
