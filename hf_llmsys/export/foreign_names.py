"""Our state-dict names -> a foreign checkpoint layout (GPT-2, GPT-Neo, T5), by the key maps our own saves use.

The layouts are declared once, as transformers ``WeightRenaming`` / ``WeightConverter`` lists, in
``hf_llmsys/models/*_checkpoint_conversion.py`` (``weight_conversion.CHECKPOINT_KEY_MAPS``; GPT-Neo's, which no
type stores, in ``hf_llmsys/checkpoints/gpt_sources.py``). ``save_pretrained``
writes them through transformers' ``revert_weight_conversion``; an export calls the same function on a state dict
that was rewritten first (``decoder_weights.py``), with the transforms that touch its keys
(``weight_conversion.transforms_matching``). Keys no transform matches keep their names.
"""

from __future__ import annotations

from types import SimpleNamespace

from transformers.core_model_loading import revert_weight_conversion

from ..models.weight_conversion import CHECKPOINT_KEY_MAPS, transforms_matching


def foreign_state_dict(state: dict, layout: str, config, transforms: list | None = None) -> dict:
    """``state`` (our names) in the layout ``layout`` (a key of ``CHECKPOINT_KEY_MAPS``, or ``transforms``)."""
    transforms = CHECKPOINT_KEY_MAPS[layout]() if transforms is None else transforms
    used = transforms_matching(transforms, state.keys())
    # revert_weight_conversion reads only these two attributes of the model it is given
    return revert_weight_conversion(SimpleNamespace(_weight_conversions=used, config=config), state)
