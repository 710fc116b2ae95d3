"""PEFT LoRA for the SFT and DPO jobs: default target modules per model type, checked targets, merge.

Defaults (`default_lora_targets`: all attention and MLP projections, not the LM head): our architectures' are their
rows' ``lora_targets`` in the registry (``hf_llmsys/architectures.py``: ``q_proj`` ``k_proj`` ``v_proj`` ``o_proj``
and the MLP's ``gate_proj`` ``up_proj`` ``down_proj``); transformers' own model types (`FOREIGN_LORA_TARGETS`)
their module names. Names the model has no module for are dropped (an ungated MLP has no ``gate_proj``). Other model
types use PEFT's ``"all-linear"``. A `--lora_target` that matches no module is an error listing the model's
linear-layer names (PEFT matches exact names or name suffixes).
"""

from __future__ import annotations

import torch

from .. import architectures

# transformers' own model types (not hf-llmsys architectures: those are in the registry) -> their projections.
FOREIGN_LORA_TARGETS = {
    "llama": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "gpt2": ["c_attn", "c_proj", "c_fc"],
    "gpt_neo": ["q_proj", "k_proj", "v_proj", "out_proj", "c_fc", "c_proj"],
    "t5": ["q", "k", "v", "o", "wi", "wi_0", "wi_1", "wo"],
}


def default_lora_targets(model_type: str) -> list[str] | None:
    """The default target modules of `model_type`: its registry row's, else transformers' type's; None: unknown."""
    if model_type in architectures.ARCHITECTURES:
        return list(architectures.architecture(model_type).lora_targets)
    return FOREIGN_LORA_TARGETS.get(model_type)


def linear_module_names(model) -> list[str]:
    """Short names of the model's linear layers (what --lora_target can name)."""
    from transformers.pytorch_utils import Conv1D

    kinds = (torch.nn.Linear, Conv1D)
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, kinds)})


def resolve_targets(model, requested: list[str] | None) -> list[str] | str:
    """The target modules for `model`: --lora_target checked against its modules, else the type's default."""
    if requested in (["all-linear"], "all-linear"):
        return "all-linear"
    available = linear_module_names(model)
    targets = requested or default_lora_targets(model.config.model_type)
    if targets is None:
        return "all-linear"
    names = [n for n, _ in model.named_modules()]
    matched = [t for t in targets if any(n == t or n.endswith(f".{t}") for n in names)]
    if not matched:
        flag = "--lora_target" if requested else f"the default LoRA targets of {model.config.model_type}"
        raise ValueError(
            f"{flag} {targets} name no module of this model; choose among its linear layers {available} "
            "(or 'all-linear')"
        )
    return matched


def lora_config(model, r: int, alpha: float, dropout: float, targets: list[str] | None):
    """The PEFT `LoraConfig` for `model`: its task type and the checked target modules (`resolve_targets`)."""
    from peft import LoraConfig, TaskType

    task = TaskType.SEQ_2_SEQ_LM if model.config.is_encoder_decoder else TaskType.CAUSAL_LM
    return LoraConfig(
        r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=resolve_targets(model, targets), task_type=task
    )


def add_lora(model, r: int, alpha: float, dropout: float, targets: list[str] | None):
    """Wrap `model` in a PEFT LoRA model (B = 0 at start, so the wrapped model computes the base model)."""
    from peft import get_peft_model

    return get_peft_model(model, lora_config(model, r, alpha, dropout, targets))


def lora_summary(model) -> dict | None:
    """LoRA settings of a PEFT model, JSON-ready (None for a plain model)."""
    config = getattr(model, "peft_config", {}).get("default")
    if config is None:
        return None
    targets = config.target_modules
    return {
        "r": config.r,
        "alpha": config.lora_alpha,
        "dropout": config.lora_dropout,
        "target_modules": sorted(targets) if isinstance(targets, set | list) else targets,
    }
