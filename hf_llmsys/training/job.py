"""The shared skeleton of every training job: arguments, seeded model, Trainer run, summary, atomic save.

A job module (`train.py` causal pre-training, `seq2seq_train.py` span corruption, `sft.py` instruction tuning)
supplies its data, model and collator and calls these. Order of a job (every check before anything is written):

1. the command parses the arguments (``cli/jobs.py``: `parse_job_args`); the job loads and checks data, tokenizer
   and config;
2. `prepare_output_dir` (writable, not a different model, leftover staging removed), `find_checkpoint`;
3. `seeded(seed, build)`: the model is built AFTER `set_seed(--seed)`, so two runs with one seed start from the
   same weights (the Trainer seeds only in its own __init__, after the model exists);
4. `run_trainer`: Trainer.train or resume, evaluation;
5. `finish_job`: runtime, cache back on, atomic save; the command's `main` prints the summary (process 0),
   with `torch_compile`: whether the model was compiled, by which backend and mode, and the graphs and graph
   breaks torch.compile recorded.

Progress notes are log records of the ``hf_llmsys`` logger, never prints: the commands (``cli/``) parse the flags,
show the records and print the summary; the jobs here take the parsed dataclasses.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from transformers import GenerationConfig, TrainingArguments, set_seed
from transformers.trainer_utils import TrainOutput

from ..kernels import COMPILED_CHUNKED_LOSS_DEVICES
from ..kernels import applied as applied_kernels
from .eval_tasks import EvalTasksArguments, eval_task_scores
from .output_dir import atomic_save


@dataclass
class JobTrainingArguments(EvalTasksArguments, TrainingArguments):
    """`TrainingArguments` plus what every llmsys job adds: resuming, refusing other models, CPU-friendly defaults,
    lm-eval tasks scored at each evaluation (`eval_tasks.py`)."""

    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Replace a different model already in output_dir and start fresh."}
    )
    resume: bool = field(
        default=True,
        metadata={"help": "Resume from the newest complete checkpoint in output_dir (--no_resume: start fresh)."},
    )
    max_new_tokens: int = field(default=128, metadata={"help": "max_new_tokens of the saved GenerationConfig."})
    disable_tqdm: bool | None = field(default=False, metadata={"help": "Hide the progress bar."})
    dataloader_pin_memory: bool = field(default=False, metadata={"help": "Pin batches in memory (GPU only)."})

    def __post_init__(self):
        super().__post_init__()
        check_report_to(self.report_to)


def check_report_to(report_to) -> None:
    """ValueError naming the install when --report_to names a tracker whose package is not installed (transformers
    would fail later, building the Trainer, with a traceback)."""
    from transformers.integrations import integration_utils

    for name in report_to or []:
        available = getattr(integration_utils, f"is_{name}_available", None)
        if available is not None and not available():
            package = {"tensorboard": "tensorboard"}.get(name, name)
            raise ValueError(f"--report_to {name}: the {package} package is not installed; pip install {package}, "
                             "or leave --report_to out")  # fmt: skip


def seeded(seed: int, build: Callable[[], object]):
    """`build()` after `set_seed(seed)`: model initialisation (and LoRA's) depends on the seed only."""
    set_seed(seed)
    return build()


def examples_per_step(training_args) -> int:
    """Training examples per optimizer step, over devices and gradient accumulation."""
    return (
        training_args.per_device_train_batch_size
        * max(1, training_args.world_size)
        * training_args.gradient_accumulation_steps
    )


def count_parameters(model) -> tuple[int, int]:
    """(all parameters, trainable parameters)."""
    params = list(model.parameters())
    return sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad)


def generation_config(tokenizer, max_new_tokens: int, **extra) -> GenerationConfig:
    """Sampling-free defaults carrying the tokenizer's special token ids."""
    return GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        max_new_tokens=max_new_tokens,
        **extra,
    )


def finish_job(
    trainer, tokenizer, gen_config: GenerationConfig, results: dict, start: float, model=None, extra=None
) -> dict:
    """Record the runtime, re-enable the cache for generation, save atomically and return the results.

    Only the main process saves (the others of a torchrun job return the same results).
    """
    output_dir = trainer.args.output_dir
    results["runtime_s"] = round(time.time() - start, 1)
    results["torch_compile"] = compile_report(trainer)
    results["kernels"] = applied_kernels(trainer.model)  # the speed layer it trained with (None: the plain model)
    if (scores := eval_task_scores(trainer)) is not None:
        results["eval_tasks"] = scores  # the --eval_tasks scores of the model saved
    model = model if model is not None else trainer.model
    model.config.use_cache = True  # the Trainer turns the cache off for training; generation wants it
    if trainer.is_world_process_zero():
        atomic_save(output_dir, model, tokenizer, gen_config, results, extra=extra)
    return results


def compile_report(trainer) -> dict:
    """What TrainingArguments' ``--torch_compile`` did: requested, compiled (the Trainer's wrapped model is a
    ``torch.compile`` module and dynamo produced graphs), backend, mode, and dynamo's graph and graph-break counts
    (``torch._dynamo.utils.counters``: this process's, a CLI run is one job per process)."""
    args = trainer.args
    report = {"requested": bool(args.torch_compile), "compiled": False, "backend": None, "mode": None}
    if not args.torch_compile:
        return report
    import torch
    from torch._dynamo.utils import counters

    wrapped = getattr(trainer, "model_wrapped", None)
    graphs = int(counters["stats"]["unique_graphs"])
    report.update(
        compiled=isinstance(wrapped, torch._dynamo.eval_frame.OptimizedModule) and graphs > 0,
        backend=args.torch_compile_backend or "inductor",
        mode=args.torch_compile_mode,
        graphs=graphs,
        graph_breaks=int(sum(counters["graph_break"].values())),
    )
    if report["compiled"]:
        report["loss"] = compiled_loss(trainer)
    return report


def compiled_loss(trainer) -> str:
    """The loss a compiled model trains with: chunked (the speed layer's ``loss_chunk_size``) on the CPU; on a GPU the
    plain one, which the models take when traced for a GPU (``kernels/chunked_cross_entropy.py``: the compiled CUDA
    code of the chunked loss gave wrong gradients)."""
    chunk = (applied_kernels(trainer.model) or {}).get("loss_chunk_size", 0) or 0
    if chunk <= 0:
        return "plain"
    if trainer.args.device.type not in COMPILED_CHUNKED_LOSS_DEVICES:
        return "plain (compiled for a GPU the chunked loss is not used: its compiled CUDA code gave wrong gradients)"
    return f"chunked, {chunk} tokens a chunk"


def loss_metrics(eval_metrics: dict, unigram: float, train_out: TrainOutput) -> dict:
    """Validation loss and perplexity, the unigram baseline and their ratio, steps and tokens seen."""
    loss = eval_metrics["eval_loss"]
    return {
        "val_loss": loss,
        "val_perplexity": math.exp(loss),
        "unigram_perplexity": unigram,
        "perplexity_ratio": unigram / math.exp(loss),
        "train_loss": train_out.training_loss,
        "global_step": train_out.global_step,
        "train_runtime_s": train_out.metrics.get("train_runtime"),
    }


def is_world_process_zero(training_args) -> bool:
    """Whether this is the process that saves and reports (process 0 of all nodes, as Trainer.is_world_process_zero)."""
    return training_args.process_index == 0


def apply_speed_layer(model, model_args) -> None:
    """``hf_llmsys.kernels.apply`` with the job's ``--loss_chunk_size``, unless ``--kernels false``."""
    if model_args.kernels:
        from .. import kernels

        kernels.apply(model, loss_chunk_size=model_args.loss_chunk_size)
