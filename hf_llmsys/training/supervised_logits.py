"""The LM head only at supervised positions: the causal-LM loss without the logits nobody learns from.

Two ways, the first preferred. (1) Our models' chunked linear cross-entropy (`enable_chunked_loss`,
``--loss_chunk_size``; the speed layer's ``kernels/chunked_cross_entropy.py``): the model's own loss drops the unsupervised positions
before the LM head and projects the rest a chunk at a time, so neither the prompt's logits nor the full logits of
the response ever exist. (2) For other causal LMs (transformers' own), the ``logits_to_keep`` mask below.

Legend: B batch, T tokens per row, K supervised positions in the batch, V vocabulary, H hidden size.

With the loss on the response only, the prompt's logits (about half of an Alpaca example's tokens) are computed,
soft-maxed over the whole vocabulary and then multiplied by a zero weight. Here the collator adds
``logits_to_keep`` = a boolean (B, T) mask of the positions whose NEXT label is supervised (position t predicts
label t + 1), and the model's own forward projects only those hidden states (transformers'
``slice_logits_to_keep``, 2-D boolean form: logits (K, V)); `SupervisedLogitsLoss` is then the causal-LM loss of
transformers' ``ForCausalLMLoss`` on them: cross-entropy summed over the K targets, divided by the Trainer's
``num_items_in_batch`` (all label tokens of the optimizer step, so gradient accumulation is one token mean), or by
K when it is not given (evaluation). Same loss and gradients as the full-logits path (tests/test_sft_logits.py);
the LM head's matmul and softmax cost K * H * V instead of B * T * H * V.

It is the Trainer's ``compute_loss_func``: the Trainer still counts ``num_items_in_batch``, scales for gradient
accumulation and for tokens averaged across processes, and the model goes through its DDP wrapper as usual.
Used only where it is exactly the model's own loss (`supports_supervised_logits`): a causal LM whose forward takes
``logits_to_keep``, no z-loss term (our models' ``z_loss_coefficient``), no label smoothing.
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F

from ..data.sft_labels import IGNORE_INDEX
from ..kernels.weight_major import PLAIN_LINEAR_TYPES
from ..models.modeling_base import LlmsysPreTrainedModel


def supervised_positions(labels: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: True at position t when label t + 1 is supervised (the last position never is)."""
    keep = torch.zeros_like(labels, dtype=torch.bool)
    keep[:, :-1] = labels[:, 1:] != IGNORE_INDEX
    return keep


class KeepSupervisedLogits:
    """Wraps a collator: its batch plus ``logits_to_keep`` (`supervised_positions` of its labels)."""

    def __init__(self, collator):
        self.collator = collator

    def __call__(self, features):
        batch = self.collator(features)
        batch["logits_to_keep"] = supervised_positions(batch["labels"])
        return batch


class SupervisedLogitsLoss:
    """Trainer ``compute_loss_func``: cross-entropy of logits (K, V) against the supervised next labels."""

    def __call__(self, outputs, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
        logits = outputs["logits"] if isinstance(outputs, dict) else outputs[0]
        targets = labels[:, 1:][labels[:, 1:] != IGNORE_INDEX]  # row-major, as the boolean slice of the model
        if logits.dim() != 2 or logits.shape[0] != targets.numel():
            raise ValueError(
                f"logits_to_keep: the model returned logits of shape {tuple(logits.shape)} for {targets.numel()} "
                "supervised positions; its forward does not take a boolean logits_to_keep mask (transformers' "
                "slice_logits_to_keep). Train it with --logits_on_labels_only false"
            )
        total = F.cross_entropy(logits.float(), targets.to(logits.device), reduction="sum")
        count = num_items_in_batch if num_items_in_batch is not None else targets.numel()
        if torch.is_tensor(count):
            count = count.to(total.device)
        return total / count


def supports_supervised_logits(model, training_args) -> tuple[bool, str]:
    """(usable, why not): whether `SupervisedLogitsLoss` is exactly this model's own training loss."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PEFT wrapper
    config = base.config
    if config.is_encoder_decoder:
        return False, f"{config.model_type} is an encoder-decoder"
    if "logits_to_keep" not in inspect.signature(base.forward).parameters:
        return False, f"{type(base).__name__}.forward takes no logits_to_keep"
    if getattr(config, "z_loss_coefficient", 0):
        return False, "the model adds a z-loss over all logits (z_loss_coefficient > 0)"
    if getattr(training_args, "label_smoothing_factor", 0):
        return False, "label smoothing is on (--label_smoothing_factor)"
    return True, ""


def enable_chunked_loss(model, chunk_size: int, training_args, kernels: bool = True) -> tuple[bool, str]:
    """Put the speed layer on an hf-llmsys `model` (``hf_llmsys.kernels.apply``; ``kernels=False``: none of it), with
    the chunked loss over `chunk_size` tokens where it is exactly the model's training loss, else without it;
    returns (chunked, why not)."""
    from .. import kernels as speed_layer

    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PEFT wrapper
    if not isinstance(base, LlmsysPreTrainedModel):
        return False, f"{type(base).__name__} has no chunked loss (not an hf-llmsys model)"
    why_not = ""
    if not kernels:
        why_not = "--kernels false"
    elif chunk_size <= 0:
        why_not = "--loss_chunk_size 0"
    elif getattr(training_args, "label_smoothing_factor", 0):
        why_not = "label smoothing is on (--label_smoothing_factor): the Trainer smooths full logits"
    elif type(base.get_output_embeddings()) not in PLAIN_LINEAR_TYPES:
        why_not = "its LM head is wrapped (an adapter on lm_head)"
    if kernels:
        speed_layer.apply(model, loss_chunk_size=0 if why_not else chunk_size)
    else:
        speed_layer.restore(base)
    return not why_not, why_not
