"""Hub-portable model code: flat files, single-dot relative imports only (copied beside saved checkpoints)."""

from .configuration_llmsys_gpt3 import LlmsysGPT3Config
from .configuration_llmsys_llama import LlmsysLlamaConfig
from .configuration_llmsys_t5 import LlmsysT5Config
from .modeling_llmsys_gpt3 import LlmsysGPT3ForCausalLM, LlmsysGPT3Model, LlmsysGPT3PreTrainedModel
from .modeling_llmsys_llama import LlmsysLlamaForCausalLM, LlmsysLlamaModel, LlmsysLlamaPreTrainedModel
from .modeling_llmsys_t5 import (
    LlmsysT5EncoderModel,
    LlmsysT5ForConditionalGeneration,
    LlmsysT5Model,
    LlmsysT5PreTrainedModel,
)

__all__ = [
    "LlmsysGPT3Config",
    "LlmsysGPT3ForCausalLM",
    "LlmsysGPT3Model",
    "LlmsysGPT3PreTrainedModel",
    "LlmsysLlamaConfig",
    "LlmsysLlamaForCausalLM",
    "LlmsysLlamaModel",
    "LlmsysLlamaPreTrainedModel",
    "LlmsysT5Config",
    "LlmsysT5EncoderModel",
    "LlmsysT5ForConditionalGeneration",
    "LlmsysT5Model",
    "LlmsysT5PreTrainedModel",
]
