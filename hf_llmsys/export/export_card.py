"""The model card (README.md) of a transformers-native export: what it was exported from and which class loads it.

Metadata through huggingface_hub's ``ModelCardData`` (``library_name: transformers``, tags naming hf-llmsys and
the target type, the pipeline task); the text names the source model and its hf-llmsys type, the transformers class
and every conversion applied to the weights (``Target.notes``), with a loading snippet that needs neither
``trust_remote_code`` nor hf-llmsys.
"""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData

PIPELINES = {"AutoModelForCausalLM": "text-generation", "AutoModelForSeq2SeqLM": "text2text-generation"}


def export_card_text(source_name: str, source_type: str, target, model_id: str) -> str:
    """The card's markdown body (after the metadata block)."""
    conversions = "".join(f"- {note}\n" for note in target.notes) or "- none: the tensors are ours, renamed\n"
    return (
        f"# {Path(model_id).name}\n\n"
        f"A **transformers-native export** of `{source_name}` (hf-llmsys `{source_type}`), written by "
        f"`llmsys export --format transformers`. It is a `{target.model_type}` checkpoint: transformers' own "
        f"`{target.class_name}` loads it, without `trust_remote_code` and without hf-llmsys installed, and so do "
        "the tools that read transformers checkpoints of that type.\n\n"
        "```python\n"
        f"from transformers import {target.auto_class}, AutoTokenizer\n\n"
        f"tokenizer = AutoTokenizer.from_pretrained({model_id!r})\n"
        f"model = {target.auto_class}.from_pretrained({model_id!r})\n"
        "```\n\n"
        "## Conversions applied (each exact)\n\n"
        f"{conversions}\n"
        "hf-llmsys tests each conversion: the exported class's float32 logits equal the hf-llmsys model's within "
        "1e-5.\n"
    )


def write_export_card(folder: Path, source_name: str, source_type: str, target, model_id: str) -> Path:
    """Write ``folder/README.md`` for an export of ``source_name``; ``model_id``: what the snippet loads (the final
    folder or a Hub id)."""
    metadata = ModelCardData(
        library_name="transformers",
        pipeline_tag=PIPELINES[target.auto_class],
        tags=["hf-llmsys", "llmsys-export", target.model_type],
    )
    body = export_card_text(source_name, source_type, target, model_id)
    card = ModelCard(f"---\n{metadata.to_yaml()}\n---\n\n{body}")
    path = Path(folder) / "README.md"
    card.save(path)
    return path
