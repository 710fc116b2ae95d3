"""Registration of hf-llmsys architectures with transformers' Auto classes and for remote code."""

from __future__ import annotations

from transformers import AutoConfig

from . import architectures


def architecture_base_class(model_class: type, config_class: type) -> type:
    """The architecture's own ``PreTrainedModel`` base of `model_class`: the last class of its MRO that declares
    `config_class` (e.g. LlmsysLlamaPreTrainedModel), shared by all of the architecture's model classes."""
    return [cls for cls in model_class.__mro__ if getattr(cls, "config_class", None) is config_class][-1]


def register_all() -> None:
    """Register every architecture of the registry; idempotent. Also marks the classes so save_pretrained ships
    their code, and gives the architecture's model classes its Auto class names (``auto_class_map``: every Auto
    class is written into a saved config's ``auto_map``, not only the saved class's)."""
    for row in architectures.ARCHITECTURES.values():
        AutoConfig.register(row.model_type, row.config_class, exist_ok=True)
        row.config_class.register_for_auto_class()
        for auto_class, model_class in row.auto_classes.items():
            auto_class.register(row.config_class, model_class, exist_ok=True)
            model_class.register_for_auto_class(auto_class.__name__)
        names = {auto_class.__name__: model_class for auto_class, model_class in row.auto_classes.items()}
        for model_class in row.auto_classes.values():
            architecture_base_class(model_class, row.config_class).auto_class_map = names
