"""`llmsys sft` (its command line: ``cli/sft.py``) / `hf_llmsys.training.sft(...)`: instruction tuning with the
Trainer, loss on the response only.

Data (`hf_llmsys.data`): Alpaca records or conversations (``messages`` / ShareGPT ``conversations``; one kind per
run), one source or a seeded mixture, checked (`--skip_invalid` drops and counts bad ones), held out
(`--validation_data` or a seeded `--validation_fraction`). Alpaca records are rendered with a prompt template and
tokenized as one text, -100 over the tokens before the seam (`sft_labels.py`); conversations are rendered through
the chat template, loss on the assistant turns (`--assistant_turns`, `conversation_labels.py`). The held-out set
is always scored on its responses only, whatever `--no_response_only_loss` trains on. `--neftune_noise_alpha`
(the Trainer's) adds NEFTune noise to the input embeddings in training steps only.

Model: the base folder through the Auto classes (causal LM or encoder-decoder, from its config), optionally
wrapped in a LoRA adapter (`lora.py`), built after `set_seed(--seed)`. Collator: padded batches
(`DataCollatorForSeq2Seq`: pad ids, -100 labels; T5's decoder inputs from the shifted labels) or, with `--packing`
(position_ids restarting per example, no attention_mask, first label of each example -100; the Trainer keeps
``use_cache=False``): ``--packing_strategy bfd`` (default) packs the examples best-fit decreasing into rows of
``--max_length`` and batches rows (`data/sft_packing.py`); ``flatten`` makes each batch of examples one row
(transformers' `DataCollatorWithFlattening`).

Loss: the summed token loss divided by the Trainer's ``num_items_in_batch``, so with gradient accumulation the loss
is one token mean over the whole optimizer step. hf-llmsys models compute it as chunked linear cross-entropy over the supervised positions
(``--loss_chunk_size``, `supervised_logits.enable_chunked_loss`: the full logits never exist); other causal LMs run
the LM head only at supervised positions (``--logits_on_labels_only``); both give the same loss and gradients as
the plain path, about half the head's work with the loss on Alpaca responses.

Length: ``--max_length`` fits the base model (`evaluation/model_limits.py`, from its config before any record is
read): default min(512, its context), a value past a learned position table refused naming the flag and the limit.

Summary (``train_results.json``; the command prints it): base model, data sources, template, max_length and how it was chosen
(``max_length_rule``), record / example / dropped counts
with reasons, response-token loss and perplexity on the held-out records before and after, steps, tokens, runtime,
LoRA settings, a few greedy answers. Logged before training: the first training example with its supervised text in
``[[...]]``. Saved (atomically, the skeleton's `output_dir.py`): the model or the adapter, tokenizer, generation
config (with a chat template: ``eos_token_id`` = the EOS and the template's end-of-turn token),
``prompt_template.json``; `--save_merged` also writes the merged model to ``output_dir/merged``. Every check
(flags, records, template, tokenizer, output folder) runs before anything is written.
"""

from __future__ import annotations

import copy
import math
import random
import time
from pathlib import Path

from transformers import (
    DataCollatorForSeq2Seq,
    DataCollatorWithFlattening,
    HfArgumentParser,
    Trainer,
)
from transformers.utils import logging

from ..data.alpaca_records import mix_records
from ..data.conversation_labels import ConversationEncoder, ConversationTemplate, last_exchange
from ..data.conversation_records import load_sft_records
from ..data.pretrained_sources import load_config
from ..data.pretrained_sources import load_model as load_named_model
from ..data.pretrained_sources import load_tokenizer as load_named_tokenizer
from ..data.prompt_templates import load_template, save_template
from ..data.sft_labels import SFTExampleEncoder, build_sft_dataset, check_tokenizer, marked_text
from ..data.sft_packing import PackedRowsCollator, pack_examples, packing_stats
from ..data.tokenizer import match_special_tokens_in_text
from ..evaluation.greedy_answers import generate_responses
from ..evaluation.model_limits import config_position_limit, fit_length
from ..kernels import applied as applied_kernels
from ..kernels import default_chunk_size
from .checkpoints import clear_checkpoints, find_checkpoint, train_or_skip
from .eval_tasks import attach_eval_tasks, check_eval_tasks
from .job import (
    count_parameters,
    finish_job,
    generation_config,
    seeded,
)
from .lora import add_lora, lora_summary
from .output_dir import atomic_save, prepare_output_dir
from .sft_arguments import (
    DEFAULT_MAX_LENGTH,
    SFTDataArguments,
    SFTModelArguments,
    SFTTrainingArguments,
    validate_sft_args,
)
from .supervised_logits import (
    KeepSupervisedLogits,
    SupervisedLogitsLoss,
    enable_chunked_loss,
    supports_supervised_logits,
)

logger = logging.get_logger(__name__)

ARGUMENT_CLASSES = (SFTModelArguments, SFTDataArguments, SFTTrainingArguments)


def load_tokenizer(model_args: SFTModelArguments):
    """The base model's tokenizer (or --tokenizer_name), with --pad_token applied."""
    source = model_args.tokenizer_name or model_args.model_name_or_path
    flag = "--tokenizer_name" if model_args.tokenizer_name else "--model_name_or_path (no --tokenizer_name given)"
    tokenizer = match_special_tokens_in_text(load_named_tokenizer(source, flag), flag)  # an older run's tokenizer
    if model_args.pad_token:
        tokenizer.pad_token = tokenizer.eos_token if model_args.pad_token == "eos" else model_args.pad_token
    return tokenizer


def load_base_config(model_args: SFTModelArguments):
    """The base model's config (decides causal LM vs encoder-decoder)."""
    return load_config(model_args.model_name_or_path, "--model_name_or_path")


def _load_one_kind(source: str, data_args, kinds: dict, loader) -> tuple[list[dict], dict]:
    """One source's checked records; every source of a run must hold the same kind (e.g. instruction / conversation)."""
    records, dropped, kind = loader(source, data_args.data_split, data_args.skip_invalid)
    kinds[source] = kind
    if len(set(kinds.values())) > 1:
        spelled = ", ".join(f"{s}: {k}" for s, k in kinds.items())
        raise ValueError(f"--data / --validation_data mix kinds of records ({spelled}); use one kind per run")
    return records, dropped


def read_records(data_args, seed: int, loader=load_sft_records) -> tuple[list[dict], list[dict], dict]:
    """(training records, held-out records, counts): sources read, checked, mixed and split by seed.

    `loader(source, split, skip_invalid)` -> (records, dropped counts, kind): SFT records by default (``llmsys dpo``
    passes its preference records' loader). ``counts["records_format"]``: the kind, for SFT ``"instruction"``
    (Alpaca records) or ``"conversation"`` (messages / ShareGPT).
    """
    sources, invalid, kinds = [], {}, {}
    for source in data_args.data:
        records, dropped = _load_one_kind(source, data_args, kinds, loader)
        sources.append(records)
        for reason, n in dropped.items():
            invalid[reason] = invalid.get(reason, 0) + n
    records = mix_records(sources, data_args.mixture_ratios, seed)
    counts = {
        "records_format": next(iter(kinds.values())),
        "records_read": sum(len(s) for s in sources) + sum(invalid.values()),
        "invalid_records": invalid,
    }
    if data_args.validation_data:
        held_out, dropped = _load_one_kind(data_args.validation_data, data_args, kinds, loader)
        counts["invalid_validation_records"] = dict(dropped)
        return records, held_out, counts
    if len(records) < 2:
        raise ValueError(f"--data: only {len(records)} usable record(s); need 2 or more to hold some out")
    n_val = min(len(records) - 1, max(1, round(data_args.validation_fraction * len(records))))
    val_idx = set(random.Random(seed).sample(range(len(records)), n_val))
    train = [r for i, r in enumerate(records) if i not in val_idx]
    return train, [r for i, r in enumerate(records) if i in val_idx], counts


def whole_sequence_labels(dataset):
    """Labels = input_ids (the loss on prompt and response alike: the baseline that response-only loss beats)."""
    return dataset.map(lambda b: {"labels": [list(ids) for ids in b["input_ids"]]}, batched=True)


def build_datasets(records, held_out, tokenizer, template, config, data_args) -> tuple:
    """(train dataset, eval dataset, train stats, eval stats, encoder)."""
    if isinstance(template, ConversationTemplate):
        encoder = ConversationEncoder(
            tokenizer, template, data_args.max_length, data_args.assistant_turns, data_args.response_overflow
        )
    else:
        encoder = SFTExampleEncoder(
            tokenizer,
            template,
            data_args.max_length,
            is_encoder_decoder=config.is_encoder_decoder,
            prompt_truncation=data_args.prompt_truncation,
            response_overflow=data_args.response_overflow,
            max_target_length=data_args.max_target_length,
        )
    train_ds, train_stats = build_sft_dataset(records, encoder)
    eval_ds, eval_stats = build_sft_dataset(held_out, encoder)
    for name, ds, stats in (("training", train_ds, train_stats), ("held-out", eval_ds, eval_stats)):
        if len(ds) == 0:
            raise ValueError(
                f"no {name} example is left after truncation to --max_length {data_args.max_length} "
                f"(dropped: {stats['dropped']}); raise --max_length or use --response_overflow truncate"
            )
    if not data_args.response_only_loss:
        train_ds = whole_sequence_labels(train_ds)
    logger.info(f"first training example, supervised text in [[...]]: {marked_text(tokenizer, train_ds[0])!r}")
    if data_args.packing and data_args.packing_strategy == "bfd":
        train_ds = pack_examples(train_ds, data_args.max_length)
        train_stats.update(packing_stats(train_ds, data_args.max_length))
    return train_ds, eval_ds, train_stats, eval_stats, encoder


def load_job_template(data_args: SFTDataArguments, tokenizer, records_format: str):
    """The template for this run's records: a prompt template (default alpaca) for instruction records, the chat
    template (``chat``, the default, or a .jinja file) for conversations."""
    if records_format == "conversation":
        return ConversationTemplate(tokenizer, data_args.template or "chat")
    return load_template(data_args.template or "alpaca", tokenizer)


def fit_max_length(data_args: SFTDataArguments, config) -> str:
    """Set ``data_args.max_length`` to what this base model takes (`model_limits.fit_length`); returns the rule.

    Default: min(512, the model's context); an explicit value past a learned position table is a ValueError
    naming --max_length and the limit (raised before any data is read or anything written)."""
    limit = config_position_limit(config)
    data_args.max_length, rule = fit_length("--max_length", data_args.max_length, limit, DEFAULT_MAX_LENGTH)
    return rule


def check_job(model_args, data_args, config, records_format: str = "instruction") -> None:
    """Combinations of flags, records and base model that cannot run."""
    if records_format == "conversation" and config.is_encoder_decoder:
        raise ValueError(
            f"--data: the records are conversations and {config.model_type} is an encoder-decoder; chat templates "
            "render one decoder sequence (give a decoder-only base, or Alpaca records)"
        )
    if records_format == "instruction" and data_args.template == "chat" and config.is_encoder_decoder:
        raise ValueError(
            f"--template chat: {config.model_type} is an encoder-decoder; chat templates render one decoder sequence "
            "(give a decoder-only base, or --template alpaca / short / a template file)"
        )
    if data_args.packing and config.is_encoder_decoder:
        raise ValueError(
            f"--packing: {config.model_type} is an encoder-decoder; packing applies to decoder-only models "
            "(drop --packing)"
        )
    if not data_args.response_only_loss and config.is_encoder_decoder:
        raise ValueError(
            "--no_response_only_loss: an encoder-decoder's labels are the response already (drop the flag)"
        )


def load_model(model_args: SFTModelArguments, config):
    """The base model (and its LoRA adapter when --lora_r > 0)."""
    kwargs = {"attn_implementation": model_args.attn_implementation} if model_args.attn_implementation else {}
    # an adapter folder (an earlier `llmsys sft --lora_r N`) is merged into its base: this run tunes the result
    model = load_named_model(model_args.model_name_or_path, "--model_name_or_path", merge_adapter=True, **kwargs)
    if model_args.lora_r:
        model = add_lora(
            model, model_args.lora_r, model_args.lora_alpha, model_args.lora_dropout, model_args.lora_target
        )
    return model


def make_collators(tokenizer, model, data_args, supervised_logits: bool = False) -> tuple:
    """(training collator, evaluation collator): padded batches, or packed rows with --packing.

    With `supervised_logits` both also give the model ``logits_to_keep`` (`supervised_logits.py`).
    """
    right = copy.copy(tokenizer)
    right.padding_side = "right"
    padded = DataCollatorForSeq2Seq(right, model=model, label_pad_token_id=-100)
    train = padded
    if data_args.packing and data_args.packing_strategy == "bfd":
        train = PackedRowsCollator(tokenizer.pad_token_id)
    elif data_args.packing:
        train = DataCollatorWithFlattening(return_position_ids=True, separator_id=-100)
    if supervised_logits:
        return KeepSupervisedLogits(train), KeepSupervisedLogits(padded)
    return train, padded


def chunked_loss(model, data_args, training_args) -> bool:
    """--loss_chunk_size on the model where it is exactly its loss (a note says why not, for our models); not given:
    the default of the device the job trains on."""
    if data_args.loss_chunk_size is None:
        data_args.loss_chunk_size = default_chunk_size(training_args.device)
    on, why_not = enable_chunked_loss(model, data_args.loss_chunk_size, training_args, kernels=data_args.kernels)
    if not on and data_args.loss_chunk_size > 0 and "hf-llmsys" not in why_not:
        logger.warning(f"--loss_chunk_size: plain loss ({why_not})")
    return on


def loss_on_supervised_logits(model, data_args, training_args) -> bool:
    """--logits_on_labels_only, where it is exactly the model's loss (a note says why not otherwise)."""
    if not data_args.logits_on_labels_only:
        return False
    usable, why_not = supports_supervised_logits(model, training_args)
    if not usable and not model.config.is_encoder_decoder:  # (an encoder-decoder's labels are all response)
        logger.info(f"--logits_on_labels_only: all logits computed ({why_not})")
    return usable


def reload_checkpoint(trainer):
    """For `train_or_skip`: load a checkpoint's weights (full model or adapter) the Trainer's own way."""

    def reload(checkpoint):
        trainer._load_from_checkpoint(checkpoint)
        return trainer.model

    return reload


def held_out_generations(model, tokenizer, template, held_out, data_args, encoder=None) -> list[dict]:
    """Greedy answers (at most --generation_max_new_tokens) for the first --num_generation_examples records.

    Each starts from the record's training prefix (`encoder`); a conversation is answered at its last assistant
    turn (shown as that turn's user ``prompt`` and expected ``output``)."""
    records = held_out[: data_args.num_generation_examples]
    if not records:
        return []
    answers = generate_responses(
        model, tokenizer, template, records, data_args.generation_max_new_tokens, data_args.max_length,
        encoder=encoder,
    )  # fmt: skip
    shown = [last_exchange(r) if "messages" in r else r for r in records]
    return [{**r, "generated": a} for r, a in zip(shown, answers, strict=True)]


def summarize(
    model_args, data_args, training_args, counts, train_stats, eval_stats, before, after, train_out, trainer,
    template, generations,
) -> dict:  # fmt: skip
    """The JSON-ready summary of an SFT run (keys documented in the module docstring)."""
    return {
        "job": "sft",
        "base_model": model_args.model_name_or_path,
        "datasets": list(data_args.data),
        "mixture_ratios": data_args.mixture_ratios,
        "validation_data": data_args.validation_data,
        "template": template.name,
        "records_format": counts.get("records_format", "instruction"),
        "assistant_turns": data_args.assistant_turns if isinstance(template, ConversationTemplate) else None,
        "neftune_noise_alpha": training_args.neftune_noise_alpha,
        "max_length": data_args.max_length,
        "prompt_truncation": data_args.prompt_truncation,
        "loss_on": "response" if data_args.response_only_loss else "sequence",
        "packing": data_args.packing,
        "packing_strategy": data_args.packing_strategy if data_args.packing else None,
        **{k: train_stats[k] for k in ("packed_rows", "packed_fill") if k in train_stats},
        "train_tokens": train_stats["tokens"],
        "logits_on_labels_only": bool(trainer.compute_loss_func),
        "loss_chunk_size": (applied_kernels(trainer.model) or {}).get("loss_chunk_size", 0),
        **{k: v for k, v in counts.items() if k != "records_format"},
        "train_examples": train_stats["examples"],
        "validation_examples": eval_stats["examples"],
        "dropped_examples": train_stats["dropped"],
        "prompt_truncated": train_stats["prompt_truncated"],
        "response_truncated": train_stats["response_truncated"],
        "train_response_tokens": train_stats["response_tokens"],
        "validation_response_tokens": eval_stats["response_tokens"],
        "response_loss_before": before,
        "response_perplexity_before": math.exp(before),
        "response_loss_after": after,
        "response_perplexity_after": math.exp(after),
        "train_loss": train_out.training_loss,
        "global_step": train_out.global_step,
        "tokens_seen": int(trainer.state.num_input_tokens_seen or 0),
        "train_runtime_s": train_out.metrics.get("train_runtime"),
        "lora": lora_summary(trainer.model),
        "parameters": dict(zip(("total", "trainable"), count_parameters(trainer.model), strict=True)),
        "seed": training_args.seed,
        "generations": generations,
    }


def save_merged(trainer, tokenizer, gen_config, results, template, output_dir: str) -> None:
    """With LoRA and --save_merged: the merged model (merge_and_unload on a copy) in output_dir/merged."""
    merged = copy.deepcopy(trainer.model).merge_and_unload()
    merged.config.use_cache = True
    atomic_save(
        Path(output_dir, "merged"), merged, tokenizer, gen_config, results, extra=lambda d: save_template(template, d)
    )


def run_sft(model_args: SFTModelArguments, data_args: SFTDataArguments, training_args: SFTTrainingArguments) -> dict:
    """The whole instruction-tuning job (see the module docstring)."""
    start = time.time()
    validate_sft_args(model_args, data_args, training_args)
    check_eval_tasks(training_args)
    config = load_base_config(model_args)
    max_length_rule = fit_max_length(data_args, config)
    tokenizer = load_tokenizer(model_args)
    check_tokenizer(tokenizer, needs_pad=True)
    records, held_out, counts = read_records(data_args, training_args.seed)
    check_job(model_args, data_args, config, counts["records_format"])
    template = load_job_template(data_args, tokenizer, counts["records_format"])
    train_ds, eval_ds, train_stats, eval_stats, encoder = build_datasets(
        records, held_out, tokenizer, template, config, data_args
    )
    prepare_output_dir(training_args.output_dir, config, training_args.overwrite_output_dir)
    checkpoint = find_checkpoint(training_args)
    model = seeded(training_args.seed, lambda: load_model(model_args, config))
    chunked = chunked_loss(model, data_args, training_args)  # it drops unsupervised positions itself
    supervised_logits = not chunked and loss_on_supervised_logits(model, data_args, training_args)
    train_collator, eval_collator = make_collators(tokenizer, model, data_args, supervised_logits)
    total, trainable = count_parameters(model)
    logger.info(
        f"model: {total:,} parameters ({trainable:,} trained); {len(train_ds)} training / {len(eval_ds)} held-out "
        f"examples; template {template.name!r}; loss on the {'response' if data_args.response_only_loss else 'whole sequence'}"
    )
    logger.info(f"max_length {data_args.max_length}: {max_length_rule}")
    if training_args.overwrite_output_dir:
        clear_checkpoints(training_args.output_dir)
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        data_collator=train_collator,
        processing_class=tokenizer,
        compute_loss_func=SupervisedLogitsLoss() if supervised_logits else None,
    )
    attach_eval_tasks(trainer)
    before = _evaluate(trainer, eval_collator)
    unmark_evaluation_prepare(trainer)
    train_out = train_or_skip(trainer, checkpoint, training_args.max_steps, reload=reload_checkpoint(trainer))
    after = _evaluate(trainer, eval_collator)
    start_id = {"decoder_start_token_id": config.decoder_start_token_id} if config.is_encoder_decoder else {}
    gen_config = generation_config(tokenizer, training_args.max_new_tokens, **start_id)
    if isinstance(template, ConversationTemplate):  # stop at the chat template's end of turn as well as the EOS
        gen_config.eos_token_id = template.stop_token_ids()
    generations = held_out_generations(trainer.model, tokenizer, template, held_out, data_args, encoder)
    results = summarize(
        model_args, data_args, training_args, counts, train_stats, eval_stats, before, after, train_out, trainer,
        template, generations,
    )  # fmt: skip
    results["max_length_rule"] = max_length_rule
    results = finish_job(trainer, tokenizer, gen_config, results, start, extra=lambda d: save_template(template, d))
    if model_args.save_merged and trainer.is_world_process_zero():
        save_merged(trainer, tokenizer, gen_config, results, template, training_args.output_dir)
    return results


def unmark_evaluation_prepare(trainer: Trainer) -> None:
    """Let the training prepare wrap the model in DDP after an evaluation that ran before training.

    `trainer.evaluate()` prepares the bare model in accelerate's evaluation mode (no DDP wrapper) and marks it
    ``_is_accelerate_prepared``; accelerate's training prepare then returns the marked model as it is, so under
    torchrun every process trained alone (weights drifted apart from the second step; accelerate 1.15,
    ``Accelerator.prepare_model``). One process needs no wrapper, so nothing changes there.
    """
    model = trainer.model
    if trainer.accelerator.num_processes > 1 and getattr(model, "_is_accelerate_prepared", False):
        model._is_accelerate_prepared = False
        trainer.accelerator._models[:] = [m for m in trainer.accelerator._models if m is not model]


def _evaluate(trainer: Trainer, collator) -> float:
    """Held-out response-token loss (the evaluation always pads; training may pack)."""
    train_collator = trainer.data_collator
    trainer.data_collator = collator
    try:
        return trainer.evaluate()["eval_loss"]
    finally:
        trainer.data_collator = train_collator


def sft(model_name_or_path: str, data: str | list[str], output_dir: str = "runs/llmsys-sft", **options) -> dict:
    """Python API of `llmsys sft`: the same job, with the flags as keyword arguments; returns the summary.

    Example: ``sft("runs/base", "alpaca.json", "runs/sft", lora_r=8, learning_rate=2e-4, max_steps=100)``.
    """
    values = {
        "model_name_or_path": str(model_name_or_path),
        "data": [str(d) for d in ([data] if isinstance(data, str | Path) else data)],
        "output_dir": str(output_dir),
        **options,
    }
    parsed = HfArgumentParser(ARGUMENT_CLASSES).parse_dict(values, allow_extra_keys=False)
    return run_sft(*parsed)
