"""``--eval_tasks``: lm-evaluation-harness tasks scored at every evaluation of a training job, logged with its loss.

A job's TrainingArguments take the flags by inheriting `EvalTasksArguments` (`job.JobTrainingArguments` does, so
``llmsys train`` and ``llmsys sft`` have them; a TRL config class can too), checks them with `check_eval_tasks`
before anything is written, and after building its Trainer calls ``attach_eval_tasks(trainer)``: one line.

Each time the Trainer logs an evaluation (``trainer.evaluate()``: the held-out loss at every ``--eval_steps``, and
whatever evaluations the job runs itself), `EvalTasksCallback` scores the tasks on the model as it is
(`lm_eval_tasks.evaluate_tasks`: adapters, the speed layer and all) and adds ``eval_<task>/<metric>`` to that same
log record, before the ``--report_to`` loggers see it: the numbers sit beside ``eval_loss`` in ``log_history``,
TensorBoard, W&B and the returned metrics (so ``--metric_for_best_model "<task>/<metric>"`` works). The callback
goes first in the Trainer's list, since callbacks see a record in order. One step is scored once (a job that
evaluates twice at a step reuses the numbers), and the random state is put back afterwards, so training draws the
same numbers with and without ``--eval_tasks``. The scores of the last step go into the job's summary
(``train_results.json``: ``eval_tasks``, `eval_task_scores`), beside the model they describe. Every process of a
distributed run scores the tasks (the numbers are the same; none of them waits for another).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from transformers import TrainerCallback
from transformers.utils import logging

logger = logging.get_logger(__name__)

FLAG = "--eval_tasks"


@dataclass
class EvalTasksArguments:
    """lm-evaluation-harness tasks scored at each evaluation (--eval_tasks)."""

    eval_tasks: list[str] | None = field(
        default=None,
        metadata={
            "help": "lm-eval task names or task YAML files (comma-separated or several) scored at every evaluation "
            "and logged beside eval_loss as eval_<task>/<metric>; needs lm-eval (pip install 'hf-llmsys[eval]')."
        },
    )
    eval_tasks_limit: float | None = field(
        default=None,
        metadata={"help": "--eval_tasks: documents per task, a count (>= 1) or a fraction (< 1); None = all."},
    )
    eval_tasks_num_fewshot: int | None = field(
        default=None, metadata={"help": "--eval_tasks: examples in each prompt; None = each task's own, else 0."}
    )
    eval_tasks_batch_size: int | None = field(
        default=None, metadata={"help": "--eval_tasks: requests per forward; None = --per_device_eval_batch_size."}
    )


# id(arguments) -> (their eval_tasks, TaskSelection): resolved once per run (lm-eval's task index takes seconds to
# build). Not an attribute of the arguments: the Trainer pickles them into every checkpoint (training_args.bin).
_SELECTIONS: dict[int, tuple] = {}


def check_eval_tasks(args):
    """The `TaskSelection` of ``args.eval_tasks`` (None without it): names, YAML files and data files checked, the
    tasks built once (a ValueError naming --eval_tasks otherwise); call it before anything is written. Remembered
    for these arguments while they live, so `attach_eval_tasks` does not resolve them again."""
    tasks = getattr(args, "eval_tasks", None)
    if not tasks:
        return None
    if args.eval_tasks_limit is not None and not args.eval_tasks_limit > 0:
        raise ValueError(f"--eval_tasks_limit {args.eval_tasks_limit:g}: give a count (>= 1) or a fraction in (0, 1)")
    if args.eval_tasks_num_fewshot is not None and args.eval_tasks_num_fewshot < 0:
        raise ValueError(f"--eval_tasks_num_fewshot {args.eval_tasks_num_fewshot}: must be >= 0")
    if args.eval_tasks_batch_size is not None and args.eval_tasks_batch_size < 1:
        raise ValueError(f"--eval_tasks_batch_size {args.eval_tasks_batch_size}: must be >= 1")
    from ..evaluation.lm_eval_tasks import select_tasks

    key, selection = _SELECTIONS.get(id(args), (None, None))
    if key != tuple(tasks):
        if id(args) not in _SELECTIONS:
            weakref.finalize(args, _SELECTIONS.pop, id(args), None)
        key, selection = tuple(tasks), select_tasks(tasks, FLAG)
        _SELECTIONS[id(args)] = (key, selection)
    return selection


class EvalTasksCallback(TrainerCallback):
    """Scores lm-eval tasks when the Trainer logs an evaluation and adds them to that log record (see the module
    docstring). `tokenizer`: the model's (a copy is handed to lm-eval)."""

    def __init__(self, selection, tokenizer, *, num_fewshot=None, limit=None, batch_size: int = 8):
        self.selection = selection
        self.tokenizer = tokenizer
        self.num_fewshot, self.limit, self.batch_size = num_fewshot, limit, batch_size
        self.scored: dict[int, dict[str, float]] = {}  # global step -> metrics (one scoring per step)

    def on_log(self, args, state, control, logs=None, model=None, **kwargs):
        prefix = evaluation_prefix(logs or {})
        if prefix is None or model is None:
            return
        if state.global_step not in self.scored:
            self.scored[state.global_step] = self.score(model)
        added = {f"{prefix}_{name}": value for name, value in self.scored[state.global_step].items()}
        logs.update(added)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(added)  # the Trainer appended a copy of `logs` before calling us

    def score(self, model) -> dict[str, float]:
        """``{task/metric: value}`` of the model now."""
        from ..evaluation.lm_eval_tasks import evaluate_tasks, keep_random_state, quiet_lm_eval, task_metrics

        with keep_random_state(), quiet_lm_eval():
            results = evaluate_tasks(
                model, self.tokenizer, self.selection, num_fewshot=self.num_fewshot, limit=self.limit,
                batch_size=self.batch_size,
            )  # fmt: skip
        metrics = task_metrics(results)
        logger.info(f"{FLAG}: " + ", ".join(f"{name} {value:.4f}" for name, value in metrics.items()))
        return metrics


def eval_task_scores(trainer) -> dict | None:
    """``{"step": N, "scores": {task/metric: value}}`` of the last step `attach_eval_tasks` scored on `trainer`
    (None: no --eval_tasks, or nothing scored yet): the job summary's record of the model it saves."""
    callback = next((c for c in trainer.callback_handler.callbacks if isinstance(c, EvalTasksCallback)), None)
    if callback is None or not callback.scored:
        return None
    step = max(callback.scored)
    return {"step": step, "scores": callback.scored[step]}


def evaluation_prefix(logs: dict) -> str | None:
    """The metric prefix of an evaluation's log record (``eval``, or ``eval_<name>`` for one of several
    evaluation sets): the Trainer's ``<prefix>_runtime``; None for any other record (training loss, summary)."""
    for key in logs:
        if key.endswith("_runtime") and key.startswith("eval"):
            return key[: -len("_runtime")]
    return None


def attach_eval_tasks(trainer, tokenizer=None):
    """Score ``trainer.args.eval_tasks`` at each evaluation (no-op without them); returns the callback or None.

    `tokenizer`: default the Trainer's ``processing_class``. The callback is put first in the Trainer's list so
    the loggers (``--report_to``) receive the task metrics in the evaluation's record.
    """
    args = trainer.args
    selection = check_eval_tasks(args)
    if selection is None:
        return None
    callback = EvalTasksCallback(
        selection, tokenizer if tokenizer is not None else trainer.processing_class,
        num_fewshot=args.eval_tasks_num_fewshot, limit=args.eval_tasks_limit,
        batch_size=args.eval_tasks_batch_size or args.per_device_eval_batch_size,
    )  # fmt: skip
    trainer.callback_handler.callbacks.insert(0, callback)
    return callback
