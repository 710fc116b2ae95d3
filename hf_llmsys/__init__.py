"""hf-llmsys: modern LLM architectures as a transformers plugin.

Importing the package registers our three model types with transformers' Auto classes (AutoConfig, AutoModel,
AutoModelForCausalLM, AutoModelForSeq2SeqLM; transformers' plugin mechanism) and for remote code, so saved folders
also load with ``trust_remote_code=True`` where hf_llmsys is not installed. Nothing of transformers changes: the
Auto classes' functions stay transformers' own and every other model type loads as without the plugin. What the
import installs touches our classes only (each says so where it is defined): strict loading, crash-safe saving,
checksums, and reading GPT-2 / GPT-Neo folders into ``llmsys_gpt3``.
"""

from .checkpoints.atomic_saving import install as _install_atomic_saving
from .checkpoints.gpt_sources import install as _install_gpt_sources
from .checkpoints.strict_loading import install as _install_strict_loading
from .checkpoints.weight_integrity import install as _install_weight_checks
from .models import (
    LlmsysGPT3Config,
    LlmsysGPT3ForCausalLM,
    LlmsysGPT3Model,
    LlmsysLlamaConfig,
    LlmsysLlamaForCausalLM,
    LlmsysLlamaModel,
    LlmsysT5Config,
    LlmsysT5EncoderModel,
    LlmsysT5ForConditionalGeneration,
    LlmsysT5Model,
)
from .presets import training_flops
from .registration import register_all

register_all()
_install_strict_loading()  # from_pretrained refuses checkpoints that do not fit (hf_llmsys/checkpoints/strict_loading.py)
_install_atomic_saving()  # save_pretrained is staged and moved into place (hf_llmsys/checkpoints/atomic_saving.py)
_install_gpt_sources()  # GPT-2 / GPT-Neo folders read as llmsys_gpt3 (hf_llmsys/checkpoints/gpt_sources.py)
_install_weight_checks()  # checksum manifests written on save, checked on load (hf_llmsys/checkpoints/weight_integrity.py)

__version__ = "0.1.0"
__all__ = [
    "LlmsysGPT3Config",
    "LlmsysGPT3ForCausalLM",
    "LlmsysGPT3Model",
    "training_flops",
    "LlmsysLlamaConfig",
    "LlmsysLlamaForCausalLM",
    "LlmsysLlamaModel",
    "LlmsysT5Config",
    "LlmsysT5EncoderModel",
    "LlmsysT5ForConditionalGeneration",
    "LlmsysT5Model",
    "register_all",
]
