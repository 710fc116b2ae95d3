"""Hub-portable model code: flat files, single-dot relative imports only (copied beside saved checkpoints)."""

from .configuration_llmsys_gpt3 import GPT3_PRESETS, LlmsysGPT3Config, training_flops
from .configuration_llmsys_llama import LlmsysLlamaConfig
from .configuration_llmsys_t5 import T5_PRESETS, LlmsysT5Config
from .modeling_llmsys_gpt3 import LlmsysGPT3ForCausalLM, LlmsysGPT3Model, LlmsysGPT3PreTrainedModel
from .modeling_llmsys_llama import LlmsysLlamaForCausalLM, LlmsysLlamaModel, LlmsysLlamaPreTrainedModel
from .modeling_llmsys_t5 import (
    LlmsysT5EncoderModel,
    LlmsysT5ForConditionalGeneration,
    LlmsysT5Model,
    LlmsysT5PreTrainedModel,
)

__all__ = [
    "GPT3_PRESETS",
    "LlmsysGPT3Config",
    "LlmsysGPT3ForCausalLM",
    "LlmsysGPT3Model",
    "LlmsysGPT3PreTrainedModel",
    "training_flops",
    "LlmsysLlamaConfig",
    "LlmsysLlamaForCausalLM",
    "LlmsysLlamaModel",
    "LlmsysLlamaPreTrainedModel",
    "T5_PRESETS",
    "LlmsysT5Config",
    "LlmsysT5EncoderModel",
    "LlmsysT5ForConditionalGeneration",
    "LlmsysT5Model",
    "LlmsysT5PreTrainedModel",
]
