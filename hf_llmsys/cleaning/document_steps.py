"""Consecutive document steps fused into one pass, the same on both cleaning engines.

`segments` groups a recipe into runs of consecutive document steps (one fused map each) and corpus steps (each on
its own); `RunDocumentSteps` is the fused map over a batch of columns: every live document goes through the run's
steps in order and the first step that drops it names the rule. The ``datasets`` engine calls it from
``Dataset.map``, the Ray engine from ``map_batches`` over Arrow blocks, so both give the same text and drops.
"""

from __future__ import annotations

from .base import Document, DocumentStep, Step
from .columns import DROP, INDEX, LANG


def segments(steps: list[Step]) -> list[list[Step]]:
    """Steps grouped into runs of consecutive document steps, each corpus step on its own."""
    groups: list[list[Step]] = []
    for step in steps:
        if isinstance(step, DocumentStep) and groups and isinstance(groups[-1][0], DocumentStep):
            groups[-1].append(step)
        else:
            groups.append([step])
    return groups


class RunDocumentSteps:
    """Batched map running document steps in order on each live document; the first drop wins."""

    def __init__(self, steps: list[DocumentStep], text_field: str):
        self.steps, self.text_field = steps, text_field

    def __call__(self, batch):
        texts, langs, drops = list(batch[self.text_field]), list(batch[LANG]), list(batch[DROP])
        for i, index in enumerate(batch[INDEX]):
            if drops[i]:
                continue
            doc = Document(texts[i], index, langs[i] or None)
            for step in self.steps:
                rule = step.apply(doc)
                if rule is not None:
                    drops[i] = rule
                    break
            texts[i], langs[i] = doc.text, doc.language or ""
        return {self.text_field: texts, LANG: langs, DROP: drops}
