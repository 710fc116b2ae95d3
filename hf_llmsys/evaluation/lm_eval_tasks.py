"""Scoring a loaded model on lm-evaluation-harness tasks: `llmsys eval`, and `--eval_tasks` while training.

lm-evaluation-harness (EleutherAI, "lm-eval" 0.4.13) does all of the evaluation: its task registry and task YAMLs,
its ``HFLM`` wrapper around our model object (so an adapter, a speed-layer model or any causal LM in memory is scored
as it is), its ``simple_evaluate``, its results JSON (``EvaluationTracker``, as ``lm_eval --output_path`` writes it)
and its table (``make_table``). What is added here is what a user needs before and around that:

- `select_tasks`: each ``--tasks`` entry is a registry name or pattern (``hellaswag``, ``arc_*``), a task YAML file
  (its ``dataset_path: json`` data files read from the current folder, as lm-eval reads them) or a folder of task
  YAMLs; a name that matches nothing, a missing or unreadable YAML and a missing data file are each one ValueError
  naming the entry and the fix, before any weight is read. lm-eval's index of its own 14,000 tasks takes ~15 s to
  build, so it is built only when an entry is neither a file nor a task of ``--include_path``.
- `harness_model`: ``HFLM`` over the model object, its backend (causal / seq2seq) from the config, since lm-eval's own
  detection knows only transformers' built-in model types; the tokenizer is copied, as HFLM may give it a pad token.
- `evaluate_tasks`: ``simple_evaluate`` with lm-eval's defaults (seeds 0 / 1234 / 1234 / 1234), so the numbers equal
  lm-eval's CLI on the same folder (``tests/test_eval_tasks.py``); `keep_random_state` puts the caller's RNG
  state back afterwards (training goes on as if no evaluation had run).
- `task_metrics`: the results as flat ``{task}/{metric}`` numbers for a logger.

lm-eval is optional (``pip install 'hf-llmsys[eval]'``); `require_lm_eval` says so in one line.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

INSTALL_HINT = "pip install 'hf-llmsys[eval]' (lm-eval>=0.4.13)"
YAML_SUFFIXES = (".yaml", ".yml")
FILE_DATASETS = ("json", "csv", "text", "parquet", "arrow")  # datasets' packaged loaders that read data_files


def require_lm_eval(flag: str) -> None:
    """ValueError naming `flag` and the install line when lm-evaluation-harness is not installed."""
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        raise ValueError(f"{flag} needs lm-evaluation-harness, which is not installed: {INSTALL_HINT}") from None


def split_task_entries(values, flag: str = "--tasks") -> list[str]:
    """The task entries of `values` (strings, each comma-separated), in order, duplicates dropped."""
    entries = [part.strip() for value in ([values] if isinstance(values, str) else values or []) for part in
               str(value).split(",")]  # fmt: skip
    entries = list(dict.fromkeys(e for e in entries if e))
    if not entries:
        raise ValueError(f"{flag} is empty; give lm-eval task names (e.g. hellaswag,arc_easy) or task YAML files")
    return entries


@dataclass
class TaskSelection:
    """What ``--tasks`` named, resolved: `specs` as ``simple_evaluate`` takes them (registry names, YAML configs)."""

    entries: list[str]
    specs: list = field(default_factory=list)
    task_manager: object = None


def _is_file_entry(entry: str) -> bool:
    """A YAML file or a folder of them (anything else is a registry name or pattern)."""
    return entry.endswith(YAML_SUFFIXES) or Path(entry).expanduser().is_dir()


def select_tasks(values, flag: str = "--tasks", include_path: str | None = None, load: bool = True) -> TaskSelection:
    """Resolve `values` (names, patterns, YAML files, folders of YAMLs) into a `TaskSelection`; each entry that
    cannot be used is a ValueError naming `flag`, the entry and the fix. `load`: also build the tasks (their
    configs and datasets) now, so a bad field or a missing dataset is refused before the model is loaded."""
    require_lm_eval(flag)
    from lm_eval.tasks import TaskManager

    entries = split_task_entries(values, flag)
    if include_path is not None and not Path(include_path).expanduser().is_dir():
        raise ValueError(f"--include_path {include_path}: no such folder (give a folder of task YAML files)")
    specs, names = [], []
    for entry in entries:
        if _is_file_entry(entry):
            specs += yaml_task_configs(entry, flag)
        else:
            names.append(entry)
    include = str(Path(include_path).expanduser()) if include_path else None
    manager = TaskManager(include_path=include, include_defaults=False, metadata={})
    if any(not manager.match_tasks([name]) for name in names):  # lm-eval's own index is needed
        manager = TaskManager(include_path=include, include_defaults=True, metadata={})
    for name in names:
        matched = manager.match_tasks([name])
        if not matched:
            raise ValueError(unknown_task_message(name, flag, manager.all_tasks))
        specs += [m for m in matched if m not in specs]
    selection = TaskSelection(entries, specs, manager)
    if load:
        load_tasks(selection, flag)
    return selection


def unknown_task_message(name: str, flag: str, known: list[str]) -> str:
    """The one line for a task name lm-eval does not know, with the closest names it does."""
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f" (closest: {', '.join(close)})" if close else ""
    return (f"{flag} {name}: lm-eval has no task, group or tag of that name{hint}; list them with `lm-eval ls tasks`, "
            "or give a task YAML file (a path ending in .yaml)")  # fmt: skip


def yaml_task_configs(entry: str, flag: str) -> list[dict]:
    """The task configs of a YAML file (or of each YAML file of a folder), ``include:`` and ``!function``
    resolved as lm-eval's CLI resolves them."""
    path = Path(entry).expanduser()
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in YAML_SUFFIXES)
        if not files:
            raise ValueError(f"{flag} {entry}: the folder holds no task YAML file (*.yaml)")
        return [config for file in files for config in yaml_task_configs(str(file), flag)]
    if not path.is_file():
        raise ValueError(f"{flag} {entry}: no such task YAML file")
    from lm_eval.tasks._yaml_loader import load_yaml

    try:
        config = load_yaml(path, resolve_func=True)
    except Exception as err:  # yaml errors, a missing include, a !function that does not import
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"{flag} {entry}: not a usable task YAML ({type(err).__name__}: {first})") from None
    if "task" not in config and "group" not in config:
        raise ValueError(f"{flag} {entry}: the YAML names no `task:` (nor a `group:`); see lm-eval's "
                         "docs/new_task_guide.md for the fields of a task")  # fmt: skip
    check_data_files(config, entry, flag)
    return [config]


def check_data_files(config: dict, entry: str, flag: str) -> None:
    """A local dataset (``dataset_path: json`` and the like) whose ``data_files`` are missing: one ValueError
    naming the file, before lm-eval (datasets) fails on it after the model has loaded."""
    if config.get("dataset_path") not in FILE_DATASETS:
        return
    data_files = (config.get("dataset_kwargs") or {}).get("data_files")
    if data_files is None:
        raise ValueError(f"{flag} {entry}: dataset_path {config['dataset_path']} needs dataset_kwargs.data_files "
                         "(the local files of the task's splits)")  # fmt: skip
    values = data_files.values() if isinstance(data_files, dict) else [data_files]
    for value in values:
        for name in [value] if isinstance(value, str) else value:
            if "://" in name or any(c in name for c in "*?["):
                continue  # a URL or a glob: datasets resolves it
            if not Path(name).expanduser().exists():
                raise ValueError(
                    f"{flag} {entry}: data file {name} not found; relative data_files are read from the current "
                    f"folder ({os.getcwd()}), as lm-eval reads them: run from the folder that holds it or give an "
                    "absolute path"
                )


def load_tasks(selection: TaskSelection, flag: str) -> dict:
    """lm-eval's ``TaskManager.load`` of the selection (configs checked, datasets read); errors name the entries."""
    try:
        return selection.task_manager.load(selection.specs)
    except (ValueError, TypeError, KeyError, OSError, ImportError, AttributeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(
            f"{flag} {','.join(selection.entries)}: lm-eval could not build the task ({type(err).__name__}: {first})"
        ) from None


def harness_model(model, tokenizer, batch_size: int | str = 1, max_length: int | None = None):
    """lm-eval's ``HFLM`` over the model object (eval mode); seq2seq backend for an encoder-decoder."""
    from lm_eval.models.huggingface import HFLM

    backend = "seq2seq" if getattr(model.config, "is_encoder_decoder", False) else "causal"
    with quiet_lm_eval():  # its warning that other arguments are ignored for a model object
        return HFLM(pretrained=model, tokenizer=copy.deepcopy(tokenizer), backend=backend, batch_size=batch_size,
                    max_length=max_length)  # fmt: skip


@contextlib.contextmanager
def quiet_lm_eval():
    """lm-eval's log records below ERROR hidden for the block."""
    import logging

    logger = logging.getLogger("lm_eval")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def keep_random_state():
    """The Python, NumPy and torch (CPU and every CUDA device) RNG states as they were before the block:
    ``simple_evaluate`` seeds them all, which must not change what a training run draws next."""
    import numpy as np
    import torch

    python_state, numpy_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=range(torch.cuda.device_count()) if torch.cuda.is_available() else []):
        try:
            yield
        finally:
            random.setstate(python_state)
            np.random.set_state(numpy_state)


def evaluate_tasks(
    model, tokenizer, tasks, *, num_fewshot: int | None = None, limit: float | None = None,
    batch_size: int | str = 1, max_length: int | None = None, log_samples: bool = False,
    apply_chat_template: bool = False, gen_kwargs: str | None = None, evaluation_tracker=None,
    model_source: str | None = None,
) -> dict:  # fmt: skip
    """lm-eval's ``simple_evaluate`` of `tasks` on `model` (restored to its train / eval mode after).

    `tasks`: a `TaskSelection`, or what `select_tasks` takes (``"hellaswag,my_task.yaml"``, a list). Returns
    lm-eval's results dict (``results``, ``groups``, ``configs``, ``n-shot``, ``config``, and ``samples`` with
    `log_samples`). `model_source`: the folder or id recorded as ``pretrained=`` in the results' config.
    """
    selection = tasks if isinstance(tasks, TaskSelection) else select_tasks(tasks, "tasks", load=False)
    from lm_eval import simple_evaluate

    training = model.training
    lm = harness_model(model, tokenizer, batch_size, max_length)
    try:
        return simple_evaluate(
            model=lm, model_args={"pretrained": model_source} if model_source else None, tasks=selection.specs,
            num_fewshot=num_fewshot, limit=_limit(limit), batch_size=batch_size, log_samples=log_samples,
            apply_chat_template=apply_chat_template, gen_kwargs=gen_kwargs, task_manager=selection.task_manager,
            evaluation_tracker=evaluation_tracker,
        )  # fmt: skip
    finally:
        model.train(training)


def _limit(limit: float | None) -> float | int | None:
    """lm-eval's ``limit``: a count of documents per task (>= 1), or a fraction of them (< 1)."""
    return int(limit) if limit is not None and limit >= 1 else limit


def metric_name(key: str) -> str:
    """lm-eval's ``"acc,none"`` -> ``"acc"``; another filter stays: ``"exact_match,strict-match"`` ->
    ``"exact_match_strict-match"``."""
    metric, _, filter_name = key.partition(",")
    return metric if filter_name in ("", "none") else f"{metric}_{filter_name}"


def task_metrics(results: dict) -> dict[str, float]:
    """``{"task/metric": value}`` for every numeric metric of every task and group (stderrs left out)."""
    flat = {}
    for section in ("results", "groups"):
        for task, values in (results.get(section) or {}).items():
            for key, value in values.items():
                if "," not in key or "_stderr" in key or isinstance(value, str | bool) or value is None:
                    continue
                flat[f"{task}/{metric_name(key)}"] = float(value)
    return flat


def results_table(results: dict) -> str:
    """lm-eval's markdown tables (tasks, then groups when there are any), as its CLI prints them."""
    from lm_eval.utils import make_table

    tables = [make_table(results)]
    if results.get("groups"):
        tables.append(make_table(results, "groups"))
    return "\n".join(tables)


def evaluation_tracker(output_path: str):
    """lm-eval's ``EvaluationTracker`` writing under `output_path` (what its CLI's ``--output_path`` makes)."""
    from lm_eval.loggers import EvaluationTracker

    return EvaluationTracker(output_path=output_path)


def save_results(tracker, results: dict, log_samples: bool) -> list[Path]:
    """Write the results JSON (and with `log_samples` one samples JSONL per task) as ``lm_eval --output_path``
    does, through its ``EvaluationTracker``; returns the files written. lm-eval logs a failed write and goes on,
    so a file that is not there afterwards is an OSError here."""
    samples = results.pop("samples", None) if log_samples else None
    tracker.save_results_aggregated(results=results, samples=samples)
    if samples:
        for task_name in results["configs"]:
            tracker.save_results_samples(task_name=task_name, samples=samples[task_name])
    folder, stem = _output_place(tracker)
    written = [folder / f"{stem}_{tracker.date_id}.json"]
    if samples:
        written += [folder / f"samples_{task}_{tracker.date_id}.jsonl" for task in results["configs"]]
    for path in written:
        if not path.is_file():
            raise OSError(f"lm-eval could not write {path} (its log above says why)")
    return written


def _output_place(tracker) -> tuple[Path, str]:
    """(folder, file stem) of the results JSON, as EvaluationTracker names it."""
    path = Path(tracker.output_path)
    if path.suffix == ".json":
        return path.parent, path.stem
    return path / str(tracker.general_config_tracker.model_name_sanitized), "results"
