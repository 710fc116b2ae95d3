"""The Hub side of hf-llmsys: model cards (`llmsys card`) and push / pull through huggingface_hub (`llmsys push`,
`llmsys pull`). Imports hf_llmsys.models read-only; models/ never imports this package."""

from .cards import build_model_card, current_hardware, write_dataset_card, write_model_card
from .folders import SavedFolder, saved_folder

__all__ = [
    "SavedFolder",
    "build_model_card",
    "current_hardware",
    "saved_folder",
    "write_dataset_card",
    "write_model_card",
]
