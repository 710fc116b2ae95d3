"""Tab 5, cleaning: which step and rule of a built-in recipe (``hf_llmsys.cleaning.RECIPES``) would drop a pasted
document, and the normalised text.

The verdict is the pipeline's own: ``hf_llmsys.cleaning.clean`` on a one-document dataset. The trace beside it
runs the recipe's document steps one by one on the same document (``Step.apply``, what the pipeline's batched map
does) to show what each step did to the text; corpus steps (deduplication) need the other documents of a corpus
and keep a lone document.
"""

from __future__ import annotations

import pandas as pd
from datasets import Dataset

from ..cleaning import RECIPES, CorpusStep, Document, clean, load_recipe
from .limits import Limits

RECIPE_NAMES = sorted(RECIPES)


def trace_steps(text: str, recipe: str) -> tuple[pd.DataFrame, str]:
    """One row per step (what it did and the characters left) and the text when the steps stop."""
    _, steps = load_recipe(recipe)
    doc, rows = Document(text, 0), []
    for step in steps:
        if isinstance(step, CorpusStep):
            rows.append({"step": step.name, "result": "corpus-level: compares documents, keeps a lone one",
                         "characters": len(doc.text)})  # fmt: skip
            continue
        before = doc.text
        rule = step.apply(doc)
        result = f"DROP ({rule})" if rule else ("changed the text" if doc.text != before else "kept")
        rows.append({"step": step.name, "result": result, "characters": len(doc.text)})
        if rule:
            break
    return pd.DataFrame(rows), doc.text


def explain(text: str, recipe: str, limits: Limits) -> tuple[str, pd.DataFrame, str]:
    """Markdown verdict, the per-step trace, and the normalised text (as the pipeline outputs it when kept)."""
    limits.check_text(text, "document")
    if recipe not in RECIPES:
        raise ValueError(f"recipe: {recipe!r} is unknown; choose one of {RECIPE_NAMES}.")
    _, steps = load_recipe(recipe)
    document_steps = [step for step in steps if not isinstance(step, CorpusStep)]  # they keep a lone document
    result = clean(Dataset.from_dict({"text": [text]}), document_steps, num_proc=None)
    dropped = result.report.to_dict()["dropped"]
    trace, traced_text = trace_steps(text, recipe)
    if dropped:
        rule = next(iter(dropped))
        verdict = f"**Dropped** by recipe `{recipe}`: step `{rule.split('.')[0]}`, rule `{rule}`."
        return verdict, trace, traced_text
    verdict = f"**Kept** by recipe `{recipe}` ({len(result.dataset[0]['text'])} characters after cleaning)."
    return verdict, trace, result.dataset[0]["text"]
