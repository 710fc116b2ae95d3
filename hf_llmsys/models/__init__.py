"""Hub-portable model code: flat files, single-dot relative imports only (copied beside saved checkpoints)."""

from .configuration_llmsys_llama import LlmsysLlamaConfig
from .modeling_llmsys_llama import LlmsysLlamaForCausalLM, LlmsysLlamaModel, LlmsysLlamaPreTrainedModel

__all__ = ["LlmsysLlamaConfig", "LlmsysLlamaForCausalLM", "LlmsysLlamaModel", "LlmsysLlamaPreTrainedModel"]
