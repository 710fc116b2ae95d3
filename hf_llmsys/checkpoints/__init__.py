"""Real pretrained checkpoints obtainable without the Hugging Face Hub, converted to ordinary transformers folders."""

from .llmsys_llama_folder import is_llmsys_llama_folder, save_as_llmsys_llama
from .smollm2 import SMOLLM2, default_cache_dir, fetch_smollm2, find_smollm2

__all__ = [
    "SMOLLM2",
    "default_cache_dir",
    "fetch_smollm2",
    "find_smollm2",
    "is_llmsys_llama_folder",
    "save_as_llmsys_llama",
]
