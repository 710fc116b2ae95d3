"""The positional-encoding zoo: one tiny LLaMA-style model per encoding, compared on length extrapolation.

Every run shares the corpus (the embedded default corpus unless files are given), the tokenizer (trained once),
the packed training blocks of ``train_length`` tokens, the optimizer budget and the seed; only
``position_embedding_type`` differs. Each model is then evaluated on the held-out text with non-overlapping
windows (stride = window, as in the ALiBi paper's evaluation) of ``factor x train_length`` tokens for each factor
in ``eval_factors`` (default 0.5, 1, 2, 4, 8). The RoPE model is also evaluated with its frequencies rescaled at
inference only (linear position interpolation, dynamic NTK, YaRN) by the length factor.

Output folder layout (read by the Gradio demo; ``FORMAT_VERSION`` changes whenever it does):

    OUT/zoo.json                 results, format below
    OUT/zoo.png                  perplexity against evaluation length, one line per run (the demo's figure)
    OUT/tokenizer/               the shared tokenizer (AutoTokenizer.from_pretrained)
    OUT/checkpoints/<encoding>/  each trained model (AutoModelForCausalLM.from_pretrained after import hf_llmsys)

``zoo.json``::

    {"format_version": 1,
     "settings": {"train_length", "eval_lengths", "eval_factors", "steps", "batch_size", "learning_rate",
                  "seed", "model": {...config fields shared by all runs...}, "vocab_size",
                  "train_tokens", "eval_tokens", "corpus"},
     "runs": [{"name": "alibi", "position_embedding_type": "alibi", "checkpoint": "checkpoints/alibi",
               "rope_scaling": null, "train_seconds": 95.2, "final_train_loss": 4.1,
               "results": [{"eval_length": 32, "ppl": 80.1, "tokens": 32768, "error": null}, ...]},
              {"name": "rope+yarn", "position_embedding_type": "rope", "checkpoint": "checkpoints/rope",
               "rope_scaling": "yarn", "results": [...]}, ...]}

A result whose evaluation cannot run (a learned table shorter than the window) has ``ppl: null`` and the
error message in ``error``.
"""

from __future__ import annotations

import json
import math
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments, default_data_collator
from transformers.trainer_callback import PrinterCallback
from transformers.utils import logging

from ..data.pretrain_text import file_chunks, split_chunks, tokenize_and_pack
from ..data.tokenizer import train_bpe_tokenizer
from ..evaluation.perplexity import corpus_perplexity
from ..models import LlmsysLlamaConfig, LlmsysLlamaForCausalLM
from ..models.positional_encodings import POSITIONAL_ENCODINGS

logger = logging.get_logger(__name__)

FORMAT_VERSION = 1
DEFAULT_FACTORS = (0.5, 1.0, 2.0, 4.0, 8.0)
# Inference-time RoPE rescaling by the length factor s = eval_length / train_length (transformers rope types).
ROPE_SCALINGS = {
    "linear": lambda s, train_length: {"rope_type": "linear", "factor": s},
    "dynamic": lambda s, train_length: {"rope_type": "dynamic", "factor": s},
    "yarn": lambda s, train_length: {
        "rope_type": "yarn",
        "factor": s,
        "original_max_position_embeddings": train_length,
    },
}


@dataclass
class ZooSettings:
    """What every run of the zoo shares."""

    out: Path
    encodings: list[str] = field(default_factory=lambda: sorted(POSITIONAL_ENCODINGS))
    train_length: int = 64
    eval_factors: tuple[float, ...] = DEFAULT_FACTORS
    steps: int = 500
    batch_size: int = 32
    learning_rate: float = 2e-3
    seed: int = 0
    vocab_size: int = 2048
    hidden_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    intermediate_size: int = 384
    train_files: list[str] | None = None
    rope_scalings: list[str] = field(default_factory=lambda: sorted(ROPE_SCALINGS))
    max_eval_chars: int | None = None  # evaluate on the first N held-out characters only (None: all of them)
    threads: int | None = None  # torch intra-op threads while the zoo runs (None: torch's default)

    @property
    def eval_lengths(self) -> list[int]:
        return [max(2, round(f * self.train_length)) for f in self.eval_factors]

    def model_fields(self) -> dict:
        return {
            "hidden_size": self.hidden_size, "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads, "intermediate_size": self.intermediate_size,
            "max_position_embeddings": self.train_length, "tie_word_embeddings": True, "norm_eps": 1e-5,
        }  # fmt: skip


# Budgets as data. "smoke": seconds, for tests of the output format. "demo": what `llmsys demo` trains in the
# background on first run: every encoding, 500 steps of 16 x 64 tokens, evaluated at 0.5x ... 8x the training length
# on 40k held-out characters (python -m benchmarks.demo_latency --zoo-train measures how long it takes).
# One thread: these models are so small that more threads cost CPU time without saving wall time, and the other
# core stays free for the page.
PRESETS: dict[str, dict] = {
    "smoke": {"steps": 3, "batch_size": 4, "train_length": 16, "hidden_size": 32, "num_hidden_layers": 1,
              "num_attention_heads": 2, "intermediate_size": 64, "vocab_size": 300, "eval_factors": (1.0, 2.0),
              "threads": 1},
    "demo": {"steps": 500, "batch_size": 16, "train_length": 64, "hidden_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 4, "intermediate_size": 192, "vocab_size": 1024, "learning_rate": 3e-3,
             "max_eval_chars": 40_000, "threads": 1},
}  # fmt: skip

ProgressFn = Callable[[dict], None]


class StepProgress(TrainerCallback):
    """Reports ``{"stage": "train", "run", "step", "steps"}`` to a progress function every few optimizer steps."""

    def __init__(self, progress: ProgressFn, run: str, every: int):
        self.progress, self.run, self.every = progress, run, max(1, every)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.every == 0 or state.global_step == state.max_steps:
            self.progress({"stage": "train", "run": self.run, "step": state.global_step, "steps": state.max_steps})


def _no_progress(event: dict) -> None:
    return None


def validate(settings: ZooSettings) -> None:
    """Clear errors for unknown encodings / scalings and impossible sizes."""
    unknown = sorted(set(settings.encodings) - set(POSITIONAL_ENCODINGS))
    if unknown:
        raise ValueError(f"--encodings: unknown {unknown}; choose among {sorted(POSITIONAL_ENCODINGS)}.")
    bad = sorted(set(settings.rope_scalings) - set(ROPE_SCALINGS))
    if bad:
        raise ValueError(f"--rope-scalings: unknown {bad}; choose among {sorted(ROPE_SCALINGS)}.")
    if settings.train_length < 4 or settings.steps < 1 or settings.batch_size < 1:
        raise ValueError("--train-length must be >= 4, --steps and --batch-size >= 1.")
    if not settings.eval_factors or min(settings.eval_factors) <= 0:
        raise ValueError("--eval-factors must be positive numbers, e.g. 0.5 1 2 4 8.")
    if settings.threads is not None and settings.threads < 1:
        raise ValueError("--threads must be >= 1 (or left out for torch's default).")
    if settings.max_eval_chars is not None and settings.max_eval_chars < 1:
        raise ValueError("max_eval_chars must be a positive number of characters (or None for all).")


def prepare_data(settings: ZooSettings):
    """Shared tokenizer, packed training blocks and held-out evaluation text."""
    chunks = [chunk for source in file_chunks(settings.train_files) for chunk in source]
    train_chunks, eval_chunks = split_chunks(chunks, 0.05, settings.seed)
    tokenizer = train_bpe_tokenizer((c["text"] for c in train_chunks), settings.vocab_size)
    train_ds = tokenize_and_pack(train_chunks, tokenizer, settings.train_length, "training")
    eval_text = "\n\n".join(c["text"] for c in eval_chunks)[: settings.max_eval_chars]
    return tokenizer, train_ds, eval_text


def train_one(
    settings: ZooSettings, encoding: str, tokenizer, train_ds, progress: ProgressFn = _no_progress
) -> tuple[LlmsysLlamaForCausalLM, dict]:
    """Train the model for one encoding with the shared budget; returns it and its training summary."""
    torch.manual_seed(settings.seed)
    config = LlmsysLlamaConfig(
        vocab_size=len(tokenizer), position_embedding_type=encoding, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, **settings.model_fields(),
    )  # fmt: skip
    model = LlmsysLlamaForCausalLM(config)
    args = TrainingArguments(
        output_dir=str(settings.out / "trainer" / encoding), max_steps=settings.steps,
        per_device_train_batch_size=settings.batch_size, learning_rate=settings.learning_rate,
        lr_scheduler_type="cosine", warmup_steps=0.05, weight_decay=0.1, adam_beta2=0.95, seed=settings.seed,
        data_seed=settings.seed, logging_steps=max(1, settings.steps // 10), save_strategy="no", report_to=[],
        disable_tqdm=True, dataloader_pin_memory=False,
    )  # fmt: skip
    start = time.time()
    callbacks = [StepProgress(progress, encoding, settings.steps // 20)]
    trainer = Trainer(
        model=model, args=args, train_dataset=train_ds, data_collator=default_data_collator, callbacks=callbacks
    )
    if progress is not _no_progress:  # the caller reports progress itself (the demo's one line): no log dicts
        trainer.remove_callback(PrinterCallback)
    output = trainer.train()
    model.config.use_cache = True
    return model.eval(), {"train_seconds": round(time.time() - start, 1), "final_train_loss": output.training_loss}


def evaluate_lengths(model, tokenizer, text: str, lengths: list[int]) -> list[dict]:
    """Perplexity with non-overlapping windows of each length; an impossible length records its error."""
    rows = []
    for length in lengths:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # beyond-context warnings are the point of the experiment
                result = corpus_perplexity(
                    model, tokenizer, text, max_length=length, stride=length, batch_size=8, show_progress=False
                )
            rows.append({"eval_length": length, "ppl": result.ppl, "tokens": result.tokens, "error": None})
        except ValueError as error:
            rows.append({"eval_length": length, "ppl": None, "tokens": 0, "error": str(error)})
    return rows


def rescaled_rope_model(checkpoint: Path, scaling: str, factor: float, train_length: int):
    """The trained RoPE model with its frequencies rescaled at inference (no training) by ``factor``."""
    config = LlmsysLlamaConfig.from_pretrained(checkpoint)
    theta = config.rope_parameters["rope_theta"]
    config.rope_parameters = {"rope_theta": theta, **ROPE_SCALINGS[scaling](factor, train_length)}
    if scaling != "dynamic":  # dynamic NTK grows from the original context by itself
        config.max_position_embeddings = math.ceil(factor * train_length)
    return LlmsysLlamaForCausalLM.from_pretrained(checkpoint, config=config).eval()


def evaluate_rope_scalings(settings: ZooSettings, tokenizer, text: str) -> list[dict]:
    """Runs for the RoPE checkpoint with each inference-time scaling (factor = max(1, eval / train length))."""
    checkpoint = settings.out / "checkpoints" / "rope"
    runs = []
    for scaling in settings.rope_scalings:
        results = []
        for length in settings.eval_lengths:
            factor = max(1.0, length / settings.train_length)
            model = rescaled_rope_model(checkpoint, scaling, factor, settings.train_length)
            results += evaluate_lengths(model, tokenizer, text, [length])
        runs.append({
            "name": f"rope+{scaling}", "position_embedding_type": "rope", "checkpoint": "checkpoints/rope",
            "rope_scaling": scaling, "results": results,
        })  # fmt: skip
    return runs


def plot(runs: list[dict], path: Path, train_length: int) -> None:
    """Perplexity against evaluation length, one line per run (the demo's figure, `plots.perplexity_by_length_figure`),
    the training length marked."""
    from ..plots import perplexity_by_length_figure, save_figure, series_frame

    series = {}
    for run in runs:
        points = [(r["eval_length"], r["ppl"]) for r in run["results"] if r["ppl"] is not None]
        if points:
            series[run["name"]] = tuple(zip(*points, strict=True))
    fig = perplexity_by_length_figure(series_frame(series), title=f"Length extrapolation, trained on {train_length} "
                                      "tokens")  # fmt: skip
    fig.axes[0].axvline(train_length, color="grey", linewidth=0.8)
    save_figure(fig, path)


def run_zoo(settings: ZooSettings, progress: ProgressFn = _no_progress) -> dict:
    """Train and evaluate every encoding; write zoo.json, zoo.png, the tokenizer and the checkpoints.

    ``progress(event)`` is called as work advances: ``{"stage": "data"}``, ``{"stage": "train", "run", "step",
    "steps"}``, ``{"stage": "evaluate", "run"}``, ``{"stage": "done"}``. zoo.json is written last, so a folder
    holding it is complete.
    """
    validate(settings)
    previous_threads = torch.get_num_threads()
    if settings.threads:
        torch.set_num_threads(settings.threads)
    try:
        return _run_zoo(settings, progress)
    finally:
        torch.set_num_threads(previous_threads)


def _run_zoo(settings: ZooSettings, progress: ProgressFn) -> dict:
    settings.out.mkdir(parents=True, exist_ok=True)
    progress({"stage": "data"})
    tokenizer, train_ds, eval_text = prepare_data(settings)
    tokenizer.save_pretrained(settings.out / "tokenizer")
    runs = []
    for encoding in settings.encodings:
        model, summary = train_one(settings, encoding, tokenizer, train_ds, progress)
        model.save_pretrained(settings.out / "checkpoints" / encoding)
        progress({"stage": "evaluate", "run": encoding})
        results = evaluate_lengths(model, tokenizer, eval_text, settings.eval_lengths)
        runs.append({"name": encoding, "position_embedding_type": encoding, "checkpoint": f"checkpoints/{encoding}",
                     "rope_scaling": None, **summary, "results": results})  # fmt: skip
        logger.info(format_run(runs[-1]))
    if "rope" in settings.encodings:
        progress({"stage": "evaluate", "run": "rope scalings"})
        for run in evaluate_rope_scalings(settings, tokenizer, eval_text):
            runs.append(run)
            logger.info(format_run(run))
    report = {"format_version": FORMAT_VERSION, "settings": settings_dict(settings, tokenizer, train_ds, eval_text),
              "runs": runs}  # fmt: skip
    shutil.rmtree(settings.out / "trainer", ignore_errors=True)  # Trainer scratch (no checkpoints are saved)
    plot(runs, settings.out / "zoo.png", settings.train_length)
    (settings.out / "zoo.json").write_text(json.dumps(report, indent=2) + "\n")  # last: marks the folder complete
    progress({"stage": "done"})
    return report


def settings_dict(settings: ZooSettings, tokenizer, train_ds, eval_text: str) -> dict:
    """The shared settings as recorded in zoo.json."""
    return {
        "train_length": settings.train_length, "eval_lengths": settings.eval_lengths,
        "eval_factors": list(settings.eval_factors), "steps": settings.steps, "batch_size": settings.batch_size,
        "learning_rate": settings.learning_rate, "seed": settings.seed, "model": settings.model_fields(),
        "vocab_size": len(tokenizer), "train_tokens": len(train_ds) * settings.train_length,
        "eval_tokens": len(tokenizer(eval_text, add_special_tokens=False)["input_ids"]),
        "corpus": settings.train_files or "embedded default corpus", "max_eval_chars": settings.max_eval_chars,
        "threads": settings.threads,
    }  # fmt: skip


def format_run(run: dict) -> str:
    """One line: run name and perplexity at each evaluation length."""
    cells = [f"{r['eval_length']}: {r['ppl']:.1f}" if r["ppl"] is not None else f"{r['eval_length']}: n/a"
             for r in run["results"]]  # fmt: skip
    return f"{run['name']:<14} " + "  ".join(cells)
