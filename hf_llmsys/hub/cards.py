"""Model and dataset cards (README.md) for saved folders, filled from the folder itself: `llmsys card FOLDER` (its parser: `cli/hub.py`).

``write_model_card(folder)`` reads what the folder holds and nothing else:
- ``config.json`` -> the architecture table (parameters counted on the model built on the meta device, layers,
  width, heads / kv heads, FFN, norm, positional encoding, per-layer attention), the Hub tags and pipeline task,
  the papers to cite (``architecture.py``, ``citations.py``), and a "Decoding" section where the architecture's paper
  decodes otherwise than transformers' default (T5: GNMT's length penalty, ``hf_llmsys.generation``);
- ``adapter_config.json`` (PEFT) -> the adapter table, ``base_model`` and the base's architecture when the base
  folder or its Hub config is at hand (``adapters.py``);
- ``report.json`` of a `llmsys clean` folder -> a dataset card instead (``write_dataset_card``: what was kept and
  dropped);
- ``train_results.json`` (written by `llmsys train` / `llmsys sft` / `llmsys dpo`) -> the training budget (tokens,
  steps, time, hardware), the evaluation table (for dpo the held-out preference figures) and the ``model-index``
  (validation perplexity and the split it was measured on). Keys read beyond the training job's losses: ``dataset``
  (name of the training data), ``datasets`` (Hub dataset ids), ``eval_split``, ``base_model``, ``method`` (how the
  folder was trained from its base, e.g. DPO's loss, beta and reference), ``hardware``; any other scalar key is
  listed as recorded.

The metadata is a ``huggingface_hub.ModelCardData`` (``library_name: transformers``, ``pipeline_tag``, tags
including ``custom_code``, ``base_model``, ``datasets``, ``license``, ``model-index`` from ``EvalResult``s). The body
is the Jinja2 template ``templates/model_card.md`` rendered with ``StrictUndefined``: a template that uses a
field the card does not have is a ValueError naming the field, never a silent blank. The card is deterministic
(no dates), so re-writing it for an unchanged folder changes no byte and an unchanged re-push makes no commit.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path

import jinja2
import torch
from huggingface_hub import DatasetCard, DatasetCardData, EvalResult, ModelCard, ModelCardData

from .adapters import PEFT_AUTO_CLASSES, adapter_facts, base_architecture
from .architecture import Architecture, describe, human_count, load_config
from .citations import bibtex
from .folders import SavedFolder, is_hub_id, saved_folder, write_text_atomically

TEMPLATE = Path(__file__).parent / "templates" / "model_card.md"
DEFAULT_LICENSE = "apache-2.0"

# train_results.json key -> (row label, formatter), in table order
TRAINING_ROWS = {
    "tokens_seen": ("tokens seen", lambda v: f"{int(v):,}"),
    "train_tokens": ("training tokens (one pass over the data)", lambda v: f"{int(v):,}"),
    "global_step": ("optimizer steps", lambda v: f"{int(v):,}"),
    "train_runtime_s": ("training time", lambda v: f"{float(v):.1f} s"),
    "runtime_s": ("wall time of the whole job", lambda v: f"{float(v):.1f} s"),
    "hardware": ("hardware", str),
    "train_loss": ("mean training loss", lambda v: f"{float(v):.4f}"),
}
EVALUATION_ROWS = {
    "val_loss": ("validation loss", lambda v: f"{float(v):.4f}"),
    "val_perplexity": ("validation perplexity", lambda v: f"{float(v):.2f}"),
    "unigram_perplexity": ("add-one unigram baseline perplexity (same tokens)", lambda v: f"{float(v):.2f}"),
    "perplexity_ratio": ("baseline / model", lambda v: f"{float(v):.2f}x"),
    "validation_tokens": ("validation tokens", lambda v: f"{int(v):,}"),
    "validation_target_tokens": ("validation target tokens", lambda v: f"{int(v):,}"),
    # llmsys dpo: held-out preference pairs
    "preference_accuracy_before": ("pairs whose chosen answer is the more likely, before", lambda v: f"{float(v):.3f}"),
    "preference_accuracy_after": ("pairs whose chosen answer is the more likely, after", lambda v: f"{float(v):.3f}"),
    "reward_margin": ("DPO reward margin (chosen - rejected)", lambda v: f"{float(v):.4f}"),
    "reward_accuracy": ("DPO reward accuracy (chosen reward > rejected)", lambda v: f"{float(v):.3f}"),
    "dpo_loss": ("DPO loss", lambda v: f"{float(v):.4f}"),
}
DESCRIPTIVE_KEYS = {"dataset", "datasets", "eval_split", "base_model", "method"}

# Architecture.decoding -> the card's "Decoding" section: how to decode as the architecture's paper does.
DECODING_SECTIONS = {
    "gnmt": """The T5 paper decodes with beam search whose finished hypotheses are scored with GNMT's length penalty
(Wu et al. 2016): sum log p(Y) / ((5 + |Y|) / 6)**alpha, 4 beams, alpha 0.6. With hf-llmsys installed,
`hf_llmsys.generation` runs it through transformers' `generate(custom_generate=...)`:

```python
from hf_llmsys.generation import beam_search, generate_gnmt

inputs = tokenizer("A sentence to continue.", return_tensors="pt")
out = generate_gnmt(model, **inputs, num_beams=4, length_penalty=0.6, max_new_tokens=64)
# the same call through generate:
out = model.generate(**inputs, num_beams=4, length_penalty=0.6, max_new_tokens=64,
                     custom_generate=beam_search, length_penalty_type="gnmt")
```

Without hf-llmsys (`trust_remote_code=True`), `model.generate(**inputs, num_beams=4, length_penalty=0.6)` is
transformers' beam search, whose length penalty is |Y|**alpha; `length_penalty_type` is not a transformers option
(`generate` refuses it as an unused keyword).""",
}


def current_hardware() -> str:
    """This machine in one line (for train_results.json's ``hardware`` when a job records where it ran)."""
    if torch.cuda.is_available():
        return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    return f"{os.cpu_count()} CPU cores ({platform.machine()})"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "data"


def load_snippets(auto_class: str, model_id: str, adapter: bool) -> tuple[str, str]:
    """Python to load the model with hf-llmsys installed, and without it (remote code)."""
    if adapter:
        peft_class = "AutoPeftModelForCausalLM" if auto_class == "AutoModelForCausalLM" else "AutoPeftModelForSeq2SeqLM"
        with_plugin = (
            f"import hf_llmsys\nfrom peft import {peft_class}\n\nmodel = {peft_class}.from_pretrained({model_id!r})"
        )
        without = f"from peft import {peft_class}\n\nmodel = {peft_class}.from_pretrained({model_id!r}, trust_remote_code=True)"
        return with_plugin, without
    with_plugin = (
        f"import hf_llmsys\nfrom transformers import {auto_class}, AutoTokenizer\n\n"
        f"tokenizer = AutoTokenizer.from_pretrained({model_id!r})\nmodel = {auto_class}.from_pretrained({model_id!r})"
    )
    without = (
        f"from transformers import {auto_class}, AutoTokenizer\n\n"
        f"tokenizer = AutoTokenizer.from_pretrained({model_id!r})\n"
        f"model = {auto_class}.from_pretrained({model_id!r}, trust_remote_code=True)"
    )
    return with_plugin, without


def decoding_section(architecture: Architecture | None) -> str:
    """The card's "Decoding" section for an architecture whose paper decodes differently from transformers' default
    (T5: GNMT's length penalty); empty otherwise."""
    decoding = architecture.decoding if architecture else None
    return DECODING_SECTIONS[decoding] if decoding else ""


def result_rows(results: dict, table: dict) -> list[tuple[str, str]]:
    return [(label, fmt(results[key])) for key, (label, fmt) in table.items() if results.get(key) is not None]


def other_rows(results: dict) -> list[tuple[str, str]]:
    """Scalar keys of train_results.json that no table shows (e.g. the SFT job's extra counts)."""
    known = set(TRAINING_ROWS) | set(EVALUATION_ROWS) | DESCRIPTIVE_KEYS
    rows = []
    for key, value in sorted(results.items()):
        if key in known or isinstance(value, (dict, list)) or value is None:
            continue
        rows.append((key, f"{value:.4g}" if isinstance(value, float) else str(value)))
    return rows


def eval_results(results: dict, task: str, dataset_name: str, dataset_id: str, split: str) -> list[EvalResult]:
    """The model-index entries: validation perplexity (and loss) on the named dataset and split."""
    entries = []
    for key, metric, name in (("val_perplexity", "perplexity", "validation perplexity"), ("val_loss", "loss", "validation loss")):  # fmt: skip
        if results.get(key) is not None:
            entries.append(
                EvalResult(
                    task_type=task,
                    dataset_type=dataset_id,
                    dataset_name=dataset_name,
                    dataset_split=split,
                    metric_type=metric,
                    metric_name=name,
                    metric_value=round(float(results[key]), 4),
                )
            )
    return entries


def limitations(parameters: int | None, trained: bool) -> str:
    if parameters is not None and parameters < 100_000_000 and trained:
        return (
            f"A {human_count(parameters)}-parameter model trained briefly on a small corpus: it shows the pipeline "
            "working end to end and produces locally plausible text in the style of its data, otherwise "
            "nonsense. It has not been evaluated for safety, bias or any downstream task; not for downstream use."
        )
    return (
        "Research code. Beyond the figures above the model has not been evaluated for safety, bias or any "
        "downstream task; check it on your own data before any use."
    )


@dataclass
class Run:
    """What the folder says about its training run (train_results.json, adapter_config.json, caller overrides)."""

    results: dict
    base: str | None
    datasets: list[str]
    dataset_name: str | None
    split: str
    method: str | None = None  # how the folder was trained from its base (llmsys dpo: "DPO (TRL ...) ...")

    @property
    def dataset_id(self) -> str:
        """The model-index dataset type: a Hub id when known, else a slug of the dataset's name."""
        return self.datasets[0] if self.datasets else slug(self.dataset_name or "training data")


def run_facts(folder: SavedFolder, base_model, datasets, hardware, adapter_base) -> Run:
    results = dict(folder.json("train_results.json") or {})
    if hardware and not results.get("hardware"):
        results["hardware"] = hardware
    datasets = list(datasets or results.get("datasets") or [])
    return Run(
        results=results,
        base=base_model or results.get("base_model") or adapter_base,
        datasets=datasets,
        dataset_name=results.get("dataset") or (datasets[0] if datasets else None),
        split=results.get("eval_split") or "validation",
        method=results.get("method"),
    )


def card_metadata(architecture: Architecture | None, run: Run, task: str, model_id: str, adapter: bool, license):
    """The ModelCardData: library, task, tags, licence, base model and datasets (Hub ids only), model-index."""
    tags = ["hf-llmsys", *(architecture.tags if architecture else []), "custom_code"]
    evaluated = eval_results(
        run.results, task, run.dataset_name or "held-out split of the training data", run.dataset_id, run.split
    )
    return ModelCardData(
        library_name="peft" if adapter else "transformers",
        pipeline_tag=task,
        tags=tags + (["lora", "peft"] if adapter else []),
        license=license,
        base_model=run.base if is_hub_id(run.base) else None,
        datasets=[d for d in run.datasets if is_hub_id(d)] or None,
        model_name=model_id,
        eval_results=evaluated or None,
    )


def summary_line(architecture: Architecture | None, run: Run, adapter: bool) -> str:
    method = f" Method: {run.method}." if run.method else ""
    if adapter:
        return (
            f"A LoRA adapter for `{run.base}`, trained with hf-llmsys (PEFT format: `adapter_config.json` + weights)."
            + method
        )
    summary = f"A {human_count(architecture.parameters)}-parameter {architecture.name} built with hf-llmsys."
    return summary + (f" Fine-tuned from `{run.base}`." if run.base else "") + method


def card_context(folder: SavedFolder, repo_id, base_model, datasets, license, hardware) -> tuple[ModelCardData, dict]:
    """The card metadata and the template fields of a model or adapter folder."""
    adapter = folder.kind == "adapter"
    adapter_rows, adapter_base = [], None
    if adapter:
        adapter_rows, adapter_base, task, _ = adapter_facts(folder)
        architecture = base_architecture(adapter_base)
    else:
        architecture = describe(load_config(folder.path))
        task = architecture.pipeline_tag
    run = run_facts(folder, base_model, datasets, hardware, adapter_base)
    model_id = repo_id or folder.path.resolve().name
    auto_class = architecture.auto_class if architecture else PEFT_AUTO_CLASSES.get(task, "AutoModelForCausalLM")
    with_plugin, without = load_snippets(auto_class, model_id, adapter)
    citations = (architecture.citations if architecture else []) + (["hu2022lora"] if adapter else [])
    context = {
        "title": model_id,
        "summary": summary_line(architecture, run, adapter),
        "model_type": architecture.model_type if architecture else "unknown (base model not at hand)",
        "architecture_name": architecture.name if architecture else "The base model's architecture",
        "architecture_rows": architecture.rows if architecture else [("base model", str(run.base))],
        "adapter_rows": adapter_rows,
        "training_data": f"Trained on {run.dataset_name}."
        if run.dataset_name
        else "The training data was not recorded in train_results.json.",
        "training_rows": result_rows(run.results, TRAINING_ROWS),
        "evaluation_rows": result_rows(run.results, EVALUATION_ROWS),
        "evaluation_dataset": run.dataset_name or "a held-out split of the training data",
        "evaluation_split": run.split,
        "other_rows": other_rows(run.results),
        "load_with_plugin": with_plugin,
        "load_without_plugin": without,
        "decoding": decoding_section(architecture),
        "limitations": limitations(architecture.parameters if architecture else None, bool(run.results)),
        "citations": bibtex(citations),
    }
    return card_metadata(architecture, run, task, model_id, adapter, license), context


def render(metadata: ModelCardData, context: dict, template: Path) -> ModelCard:
    """Render ``template`` with StrictUndefined; a field the card lacks is a ValueError naming it and the file."""
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    try:
        text = environment.from_string(template.read_text(encoding="utf-8")).render(
            card_data=metadata.to_yaml(), **context
        )
    except jinja2.UndefinedError as err:
        raise ValueError(
            f"card template {template}: {err.message}; the fields a model card provides are {sorted(context)} "
            "and card_data."
        ) from err
    except jinja2.TemplateSyntaxError as err:
        raise ValueError(f"card template {template}, line {err.lineno}: {err.message}") from err
    return ModelCard(text)


def build_model_card(
    folder: str | Path,
    *,
    repo_id: str | None = None,
    base_model: str | None = None,
    datasets: list[str] | None = None,
    license: str = DEFAULT_LICENSE,
    hardware: str | None = None,
    template: str | Path | None = None,
) -> ModelCard:
    """The ModelCard of a saved model or adapter folder (see the module docstring for what is read)."""
    saved = saved_folder(folder)
    if saved.kind == "dataset":
        raise ValueError(f"{saved.path} is a dataset (llmsys clean output): use write_dataset_card for it.")
    metadata, context = card_context(saved, repo_id, base_model, datasets, license, hardware)
    return render(metadata, context, Path(template) if template else TEMPLATE)


def write_model_card(
    folder: str | Path,
    *,
    repo_id: str | None = None,
    base_model: str | None = None,
    datasets: list[str] | None = None,
    license: str | None = None,
    hardware: str | None = None,
    template: str | Path | None = None,
) -> Path:
    """Write (or refresh) ``folder/README.md``, the model card of a saved model or adapter; returns its path.

    A refresh keeps what only the previous card knew: its ``base_model``, ``datasets`` and ``license`` stay
    unless given here (the licence defaults to apache-2.0 for a new card).

    ``hardware`` fills the training table's hardware row when train_results.json does not record it.
    """
    saved = saved_folder(folder)
    if saved.kind == "dataset":
        return write_dataset_card(saved.path, repo_id=repo_id, license=license)
    previous = previous_card_data(saved.path / "README.md")
    base_model = base_model or previous.get("base_model")
    datasets = datasets or previous.get("datasets")
    license = license or previous.get("license") or DEFAULT_LICENSE
    card = build_model_card(
        saved.path,
        repo_id=repo_id,
        base_model=base_model,
        datasets=datasets,
        license=license,
        hardware=hardware,
        template=template,
    )
    path = saved.path / "README.md"
    write_text_atomically(path, str(card))
    return path


def previous_card_data(readme: Path) -> dict:
    """The metadata of an existing card (empty when there is none or it does not parse)."""
    if not readme.is_file():
        return {}
    try:
        return ModelCard.load(readme, ignore_metadata_errors=True).data.to_dict()
    except Exception:  # noqa: BLE001 - a hand-broken README is replaced, not a reason to refuse
        return {}


def write_dataset_card(folder: str | Path, *, repo_id: str | None = None, license: str | None = None) -> Path:
    """README.md of a `llmsys clean` output folder: what was kept and dropped, from its report.json."""
    saved = saved_folder(folder)
    report = saved.json("report.json") or {}
    dropped = report.get("dropped") or {}
    steps = report.get("steps") or []
    step_names = [s.get("name", str(s)) if isinstance(s, dict) else str(s) for s in steps]
    metadata = DatasetCardData(
        license=license, tags=["hf-llmsys", "llmsys-clean"], task_categories=["text-generation"], pretty_name=repo_id
    )
    rows = "".join(f"| {key} | {report[key]:,} |\n" for key in ("documents_in", "documents_out", "characters_in", "characters_out") if isinstance(report.get(key), int))  # fmt: skip
    drops = "".join(f"| {rule} | {count:,} |\n" for rule, count in sorted(dropped.items()))
    body = (
        f"---\n{metadata.to_yaml()}\n---\n\n# {repo_id or saved.path.resolve().name}\n\n"
        f"Pretraining text cleaned by `llmsys clean` (hf-llmsys). File: `{saved.data_file.name}`; the full report "
        f"is `report.json`.\n\nSteps: {', '.join(step_names) or 'not recorded'}.\n\n"
        f"| figure | value |\n|---|---|\n{rows}\n"
        + (f"Documents dropped per rule:\n\n| rule | documents |\n|---|---|\n{drops}" if drops else "")
    )
    card = DatasetCard(body)
    path = saved.path / "README.md"
    write_text_atomically(path, str(card))
    return path
