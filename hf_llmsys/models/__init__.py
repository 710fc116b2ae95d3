"""Hub-portable model code: flat files, single-dot relative imports only (copied beside saved checkpoints)."""

from .configuration_llmsys_gpt3 import GPT3_PRESETS, LlmsysGPT3Config, training_flops
from .configuration_llmsys_llama import LlmsysLlamaConfig
from .modeling_llmsys_gpt3 import LlmsysGPT3ForCausalLM, LlmsysGPT3Model, LlmsysGPT3PreTrainedModel
from .modeling_llmsys_llama import LlmsysLlamaForCausalLM, LlmsysLlamaModel, LlmsysLlamaPreTrainedModel

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
]
