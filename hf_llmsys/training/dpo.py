"""`llmsys dpo` (its command line: ``cli/dpo.py``) / `hf_llmsys.training.dpo.dpo(...)`: preference tuning on TRL's
`DPOTrainer`, the llmsys job's way.

TRL is the engine: its `DPOTrainer` computes the loss (every TRL 1.16 ``--loss_type``: sigmoid, ipo, hinge, ...), the
reference log-probabilities, the rewards and its metrics; `LlmsysDPOTrainer` only takes the pairs this job
tokenized and leaves the model card to the job. Around it, the skeleton every llmsys job shares (`job.py`): flags
checked, then records, template, tokenizer, length and output folder, all before anything is written; the model
built after ``set_seed``; resuming from checkpoints; an atomic save with a model card; a printed summary.

Data (`data/preference_records.py`): ``prompt`` / ``chosen`` / ``rejected`` records, text or OpenAI messages (TRL's
explicit or implicit prompt), one source or a seeded mixture, held out by ``--validation_data`` or a seeded
``--validation_fraction``. Prompts are rendered as `llmsys sft` renders them (`data/preference_pairs.py`: the SFT
encoder of the run's template), and the template is by default the one an SFT run saved beside the model
(``prompt_template.json``), else alpaca for text records and the tokenizer's chat template for conversations.

Model (``--model_name_or_path``) and reference, as TRL 1.16 arranges them:

- a model folder (a base or a full SFT folder), ``--lora_r 0``: the whole model is tuned; the reference is a frozen
  copy of it, loaded by the same loader (none with ``--precompute_ref_log_probs``: TRL scores the pairs once);
- a model folder with ``--lora_r N``: a new LoRA adapter (`lora.py`'s targets) is tuned; the reference is the
  model with the adapter disabled;
- an SFT adapter folder (``adapter_config.json``): the base it names is loaded and that adapter trained further
  (``--lora_r`` stays 0); TRL's reference is a frozen copy of the adapter as it starts (its ``"ref"`` adapter), i.e.
  the SFT model. The saved folder is again an adapter on the same base.

An encoder-decoder (``llmsys_t5``) is refused: TRL 1.16's DPOTrainer joins prompt and answer into one decoder
sequence and has no encoder-decoder path.

Summary (``train_results.json``; the command prints it): base, data, template, method (TRL version, loss, beta, reference), pair
counts, held-out figures before and after (``preference_accuracy``: pairs whose chosen answer the model gives a
higher log-probability than the rejected one; after training also TRL's DPO loss, reward margin and reward accuracy
on the held-out pairs), steps, a few greedy answers before and after. Saved: the model or adapter, tokenizer,
generation config, ``prompt_template.json``, README.md; ``--save_merged`` (LoRA / adapter) also the merged model in
``output_dir/merged``. The folder works with `llmsys chat`, `export`, `push` and the demo as an SFT folder does.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from transformers import HfArgumentParser
from transformers.utils import logging
from trl import DPOTrainer

from ..data.conversation_labels import ConversationTemplate
from ..data.preference_pairs import COLUMNS, PreferencePairEncoder, build_preference_dataset, marked_pair
from ..data.preference_records import load_preference_records
from ..data.pretrained_sources import ADAPTER_CONFIG, adapter_base, check_source, load_causal_lm, load_config
from ..data.pretrained_sources import load_tokenizer as load_named_tokenizer
from ..data.prompt_templates import TEMPLATE_FILE, ChatPromptTemplate, PromptTemplate, load_template, save_template
from ..data.sft_labels import check_tokenizer
from ..data.tokenizer import match_special_tokens_in_text
from ..evaluation.greedy_answers import generate_responses
from ..evaluation.model_limits import config_position_limit, fit_length
from .checkpoints import clear_checkpoints, find_checkpoint, train_or_skip
from .dpo_arguments import (
    DPODataArguments,
    DPOModelArguments,
    DPOTrainingArguments,
    validate_dpo_args,
)
from .eval_tasks import attach_eval_tasks, check_eval_tasks
from .job import count_parameters, finish_job, generation_config
from .job import seeded as seeded_build
from .lora import lora_config, lora_summary
from .output_dir import prepare_output_dir
from .sft import read_records, reload_checkpoint, save_merged
from .sft_arguments import DEFAULT_MAX_LENGTH

logger = logging.get_logger(__name__)

ARGUMENT_CLASSES = (DPOModelArguments, DPODataArguments, DPOTrainingArguments)
REFERENCES = {
    "full": "a frozen copy of the starting model",
    "precomputed": "the starting model, its log-probabilities computed once before training",
    "lora": "the starting model (the new LoRA adapter disabled)",
    "adapter": "the SFT adapter as it started (TRL's frozen 'ref' copy of it)",
}


class LlmsysDPOTrainer(DPOTrainer):
    """TRL's `DPOTrainer` on pairs tokenized by this job (`data/preference_pairs.py`), loss and all else TRL's.

    Two changes: a dataset that already holds ``prompt_ids`` / ``chosen_ids`` / ``rejected_ids`` is taken as it is
    (TRL would re-tokenize from text); and TRL's model card, which it writes into the output folder at every
    checkpoint, is not written (the job writes its own card with the final, atomic save).
    """

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        if set(COLUMNS) <= set(dataset.column_names):
            return dataset
        return super()._prepare_dataset(dataset, processing_class, args, dataset_name)

    def create_model_card(self, *args, **kwargs) -> None:
        """No card mid-run: the output folder keeps the previous complete model and its card until the final save."""

    @torch.no_grad()
    def pair_log_probs(self, dataset) -> tuple[torch.Tensor, torch.Tensor]:
        """(chosen, rejected) summed log-probabilities of the answers of every pair of `dataset` under the model
        being trained, as TRL's loss sums them (its collator, its fused LM head, the completion mask). Shapes (N,)."""
        model = self.model
        was_training = model.training
        model.eval()
        loader = torch.utils.data.DataLoader(
            dataset.select_columns(list(COLUMNS)), batch_size=self.args.per_device_eval_batch_size,
            collate_fn=self.data_collator,
        )  # fmt: skip
        chosen, rejected = [], []
        device = next(model.parameters()).device
        for batch in loader:
            ids, mask, completion = (batch[k].to(device) for k in ("input_ids", "attention_mask", "completion_mask"))
            labels = ids.masked_fill(completion == 0, -100)
            out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True, use_cache=False)
            logps = out.log_probs[:, -(completion.size(1) - 1) :].sum(dim=1).float().cpu()
            c, r = logps.chunk(2)
            chosen.append(c)
            rejected.append(r)
        model.train(was_training)
        return torch.cat(chosen), torch.cat(rejected)


def inspect_model(model_args: DPOModelArguments) -> tuple[object, str | None]:
    """(config of the model to tune, base of an adapter folder or None); refuses what TRL 1.16 cannot tune."""
    flag = "--model_name_or_path"
    source = model_args.model_name_or_path
    check_source(source, flag, needs=("config.json", ADAPTER_CONFIG))
    if not Path(source).expanduser().is_dir():
        raise ValueError(f"{flag} {source}: no such folder (give a saved model or adapter folder)")
    base = adapter_base(source, flag)
    if base is not None and model_args.lora_r:
        raise ValueError(
            f"--lora_r {model_args.lora_r}: {source} is a LoRA adapter, which dpo trains further as it is; drop "
            "--lora_r, or give the merged model (llmsys sft --save_merged) to start a new adapter"
        )
    config = load_config(source, flag)
    if config.is_encoder_decoder:
        raise ValueError(
            f"{flag} {source}: {config.model_type} is an encoder-decoder; TRL 1.16's DPOTrainer tunes decoder-only "
            "(causal) LMs only (it joins prompt and answer into one sequence): give a llmsys_llama / llmsys_gpt3 model"
        )
    return config, base


def tuning_kind(model_args: DPOModelArguments, base: str | None) -> str:
    """``adapter`` (an SFT adapter trained further), ``lora`` (a new adapter) or ``full``."""
    if base is not None:
        return "adapter"
    return "lora" if model_args.lora_r else "full"


def check_job(model_args: DPOModelArguments, training_args, kind: str) -> None:
    """Combinations of flags and model that TRL would refuse only after the output folder exists."""
    if model_args.save_merged and kind == "full":
        raise ValueError("--save_merged needs a LoRA adapter: give --lora_r > 0 or an adapter folder")
    if training_args.sync_ref_model and kind != "full":
        raise ValueError("--sync_ref_model: TRL keeps no reference model to synchronise when tuning an adapter "
                         "(the reference is the adapter disabled or its frozen copy); drop it or tune the full model")  # fmt: skip


def load_tokenizer(model_args: DPOModelArguments):
    """--tokenizer_name, else the model or adapter folder's tokenizer (an adapter without one: its base's, the shared
    loader's rule); pad = --pad_token, else the tokenizer's, else its EOS (TRL's rule)."""
    source, flag = model_args.tokenizer_name, "--tokenizer_name"
    if source is None:
        source, flag = model_args.model_name_or_path, "--model_name_or_path (no --tokenizer_name given)"
    tokenizer = match_special_tokens_in_text(load_named_tokenizer(source, flag), flag)
    if model_args.pad_token:
        tokenizer.pad_token = tokenizer.eos_token if model_args.pad_token == "eos" else model_args.pad_token
    elif tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    check_tokenizer(tokenizer, needs_pad=True)
    return tokenizer


def choose_template(data_args: DPODataArguments, tokenizer, records_format: str, model_folder: str):
    """(template, where it came from): what `llmsys sft` renders these records with for this model (module doc).

    Conversations go through a chat template (the tokenizer's, or a .jinja file); text records through a prompt
    template (a chat template saved by an SFT run on conversations renders them as one-turn conversations).
    """
    saved = Path(model_folder, TEMPLATE_FILE)
    if data_args.template is not None:
        spec, origin = data_args.template, "--template"
    elif saved.is_file():
        spec, origin = model_folder, f"{TEMPLATE_FILE} saved beside the model by llmsys sft"
    else:
        spec = "chat" if records_format == "conversation" else "alpaca"
        origin = f"the default for {records_format} records"
    if records_format == "conversation":
        if Path(spec).is_dir():
            template = load_template(spec, tokenizer)
            if isinstance(template, PromptTemplate):
                raise ValueError(
                    f"--data: the records are conversations, but {model_folder} was instruction-tuned with the text "
                    f"template {template.name!r} ({TEMPLATE_FILE}); give text records, or --template chat to render "
                    "them with the tokenizer's chat template anyway"
                )
            spec = "chat"
        return ConversationTemplate(tokenizer, spec), origin
    template = load_template(spec, tokenizer)
    if isinstance(template, ConversationTemplate) and not isinstance(template, ChatPromptTemplate):
        template = ChatPromptTemplate(tokenizer)  # an SFT run on conversations: a text prompt is one user turn
    return template, origin


def fit_max_length(training_args, config) -> str:
    """Set ``--max_length`` to what the model takes (`model_limits.fit_length`, as `llmsys sft`); returns the rule."""
    limit = config_position_limit(config)
    training_args.max_length, rule = fit_length("--max_length", training_args.max_length, limit, DEFAULT_MAX_LENGTH)
    return rule


def build_datasets(records, held_out, encoder: PreferencePairEncoder, max_length: int) -> tuple:
    """(train dataset, eval dataset, train stats, eval stats): pairs tokenized and fitted to --max_length."""
    train_ds, train_stats = build_preference_dataset(records, encoder)
    eval_ds, eval_stats = build_preference_dataset(held_out, encoder)
    for name, ds, stats in (("training", train_ds, train_stats), ("held-out", eval_ds, eval_stats)):
        if len(ds) == 0:
            raise ValueError(
                f"no {name} pair is left after fitting to --max_length {max_length} (dropped: {stats['dropped']}); "
                "raise --max_length or use --response_overflow truncate"
            )
    logger.info(f"first training pair, answers in [[...]]: {marked_pair(encoder.tokenizer, train_ds[0])!r}")
    return train_ds, eval_ds, train_stats, eval_stats


def load_policy(model_args: DPOModelArguments, trainable_adapter: bool = True):
    """The model to tune through the shared loader: a model folder, or an adapter folder's base with that adapter on
    it, left trainable (the adapter is what this run trains). Also the full run's reference (a second copy)."""
    kwargs = {"attn_implementation": model_args.attn_implementation} if model_args.attn_implementation else {}
    return load_causal_lm(model_args.model_name_or_path, "--model_name_or_path", trainable_adapter=trainable_adapter,
                          **kwargs)  # fmt: skip


def held_out_metrics(trainer: LlmsysDPOTrainer, eval_ds, with_trl: bool) -> dict:
    """The held-out figures: mean answer log-probs and the preference accuracy (chosen more likely than rejected);
    `with_trl`: also TRL's own evaluation (DPO loss, reward margin and accuracy against the reference)."""
    chosen, rejected = trainer.pair_log_probs(eval_ds)
    figures = {
        "preference_accuracy": (chosen > rejected).float().mean().item(),
        "logps_chosen": chosen.mean().item(),
        "logps_rejected": rejected.mean().item(),
    }
    if with_trl:
        metrics = trainer.evaluate()
        figures.update(
            dpo_loss=metrics["eval_loss"],
            reward_margin=metrics["eval_rewards/margins"],
            reward_accuracy=metrics["eval_rewards/accuracies"],
        )
    return figures


def greedy_answers(model, tokenizer, template, encoder: PreferencePairEncoder, records, data_args, max_length) -> list:
    """Greedy answers to the first --num_generation_examples held-out prompts, from the chosen side's SFT prefix."""
    shown = records[: data_args.num_generation_examples]
    if not shown:
        return []
    sft_records = [encoder.sft_record(r) for r in shown]
    return generate_responses(model, tokenizer, template, sft_records, data_args.generation_max_new_tokens,
                              max_length, encoder=encoder.sft_encoder)  # fmt: skip


def method_text(training_args, kind: str, source: str) -> str:
    """One line naming the method for the summary and the model card."""
    import trl

    losses = "+".join(training_args.loss_type)
    tuned = {"full": "full fine-tuning", "lora": "a new LoRA adapter", "adapter": "the SFT adapter trained further"}
    return (
        f"DPO (TRL {trl.__version__} DPOTrainer, loss {losses}, beta {training_args.beta:g}) from `{source}`: "
        f"{tuned[kind]}, reference: {REFERENCES[reference_key(training_args, kind)]}"
    )


def reference_key(training_args, kind: str) -> str:
    """The key of `REFERENCES`: the tuning kind, or ``precomputed`` for full tuning with --precompute_ref_log_probs."""
    if kind == "full" and training_args.precompute_ref_log_probs:
        return "precomputed"
    return kind


def summarize(model_args, data_args, training_args, counts, stats, before, after, train_out, trainer, template,
              template_origin, kind, base, answers) -> dict:  # fmt: skip
    """The JSON-ready summary of a DPO run (module doc)."""
    train_stats, eval_stats = stats
    return {
        "job": "dpo",
        "method": method_text(training_args, kind, model_args.model_name_or_path),
        "base_model": base or model_args.model_name_or_path,
        "started_from": model_args.model_name_or_path,
        "tuning": kind,
        "reference": REFERENCES[reference_key(training_args, kind)],
        "loss_type": list(training_args.loss_type),
        "loss_weights": training_args.loss_weights,
        "beta": training_args.beta,
        "datasets": list(data_args.data),
        "mixture_ratios": data_args.mixture_ratios,
        "validation_data": data_args.validation_data,
        "template": template.name,
        "template_from": template_origin,
        "records_format": counts["records_format"],
        "max_length": training_args.max_length,
        "records_read": counts["records_read"],
        "invalid_records": counts["invalid_records"],
        **(
            {"invalid_validation_records": counts["invalid_validation_records"]}
            if "invalid_validation_records" in counts
            else {}
        ),  # fmt: skip
        "train_pairs": train_stats["pairs"],
        "validation_pairs": eval_stats["pairs"],
        "dropped_pairs": train_stats["dropped"],
        "prompt_truncated": train_stats["prompt_truncated"],
        "response_truncated": train_stats["response_truncated"],
        "prompt_tail_moved": train_stats["prompt_tail_moved"],
        "train_tokens": train_stats["tokens"],
        "held_out_before": before,
        "held_out_after": after,
        "preference_accuracy_before": before["preference_accuracy"],
        "preference_accuracy_after": after["preference_accuracy"],
        "reward_margin": after["reward_margin"],
        "reward_accuracy": after["reward_accuracy"],
        "dpo_loss": after["dpo_loss"],
        "train_loss": train_out.training_loss,
        "global_step": train_out.global_step,
        "tokens_seen": int(trainer._total_train_tokens),
        "train_runtime_s": train_out.metrics.get("train_runtime"),
        "lora": lora_summary(trainer.model),
        "parameters": dict(zip(("total", "trainable"), count_parameters(trainer.model), strict=True)),
        "seed": training_args.seed,
        "generations": answers,
    }


def read_preference_records(data_args, seed: int):
    """(training records, held-out records, counts) through SFT's reader with the preference records' loader."""
    return read_records(data_args, seed, loader=load_preference_records)


def run_dpo(model_args: DPOModelArguments, data_args: DPODataArguments, training_args: DPOTrainingArguments) -> dict:
    """The whole preference-tuning job (see the module docstring)."""
    start = time.time()
    validate_dpo_args(model_args, data_args, training_args)
    config, base = inspect_model(model_args)
    kind = tuning_kind(model_args, base)
    check_job(model_args, training_args, kind)
    check_eval_tasks(training_args)
    max_length_rule = fit_max_length(training_args, config)
    tokenizer = load_tokenizer(model_args)
    records, held_out, counts = read_preference_records(data_args, training_args.seed)
    template, origin = choose_template(data_args, tokenizer, counts["records_format"], model_args.model_name_or_path)
    encoder = PreferencePairEncoder(
        tokenizer, template, training_args.max_length, data_args.prompt_truncation, data_args.response_overflow
    )
    train_ds, eval_ds, train_stats, eval_stats = build_datasets(records, held_out, encoder, training_args.max_length)
    prepare_output_dir(training_args.output_dir, config, training_args.overwrite_output_dir)
    checkpoint = find_checkpoint(training_args)
    model = seeded_build(training_args.seed, lambda: load_policy(model_args))
    peft_config = None
    if kind == "lora":
        peft_config = lora_config(
            model, model_args.lora_r, model_args.lora_alpha, model_args.lora_dropout, model_args.lora_target
        )
    ref_model = None  # TRL's rule for an adapter (module doc) and for --precompute_ref_log_probs
    if kind == "full" and not training_args.precompute_ref_log_probs:
        ref_model = load_policy(model_args, trainable_adapter=False)
    logger.info(f"max_length {training_args.max_length}: {max_length_rule}")
    logger.info(f"template {template.name!r} ({origin}); {len(train_ds)} training / {len(eval_ds)} held-out pairs")
    if training_args.overwrite_output_dir:
        clear_checkpoints(training_args.output_dir)
    trainer = LlmsysDPOTrainer(
        model=model, ref_model=ref_model, args=training_args, train_dataset=train_ds, eval_dataset=eval_ds,
        processing_class=tokenizer, peft_config=peft_config,
    )  # fmt: skip
    attach_eval_tasks(trainer)
    total, trainable = count_parameters(trainer.model)
    logger.info(f"{kind} tuning: {total:,} parameters ({trainable:,} trained); reference: {REFERENCES[reference_key(training_args, kind)]}")  # fmt: skip
    before = held_out_metrics(trainer, eval_ds, with_trl=False)
    answers_before = greedy_answers(trainer.model, tokenizer, template, encoder, held_out, data_args, training_args.max_length)  # fmt: skip
    train_out = train_or_skip(trainer, checkpoint, training_args.max_steps, reload=reload_checkpoint(trainer))
    after = held_out_metrics(trainer, eval_ds, with_trl=True)
    answers_after = greedy_answers(trainer.model, tokenizer, template, encoder, held_out, data_args, training_args.max_length)  # fmt: skip
    shown = [{"prompt": _prompt_text(r), "chosen": r["chosen"], "rejected": r["rejected"]} for r in held_out]
    answers = [{**s, "before": b, "after": a} for s, b, a in zip(shown, answers_before, answers_after, strict=False)]
    if kind == "adapter" and "ref" in trainer.model.peft_config:
        trainer.model.delete_adapter("ref")  # TRL's frozen reference copy is not part of the result
    gen_config = generation_config(tokenizer, training_args.max_new_tokens)
    if isinstance(template, ConversationTemplate):  # stop at the chat template's end of turn as well as the EOS
        gen_config.eos_token_id = template.stop_token_ids()
    results = summarize(
        model_args, data_args, training_args, counts, (train_stats, eval_stats), before, after, train_out, trainer,
        template, origin, kind, base, answers,
    )  # fmt: skip
    results["max_length_rule"] = max_length_rule
    results = finish_job(trainer, tokenizer, gen_config, results, start, extra=lambda d: save_template(template, d))
    if model_args.save_merged and trainer.is_world_process_zero():
        save_merged(trainer, tokenizer, gen_config, results, template, training_args.output_dir)
    return results


def _prompt_text(record: dict) -> str:
    """The prompt of a normalised preference record as one string (a conversation's last user turn)."""
    if "messages" in record:
        return next((m["content"] for m in reversed(record["messages"]) if m["role"] == "user"), "")
    return record["prompt"] + (f"\n\n{record['input']}" if record.get("input") else "")


def dpo(model_name_or_path: str, data: str | list[str], output_dir: str = "runs/llmsys-dpo", **options) -> dict:
    """Python API of `llmsys dpo`: the same job, with the flags as keyword arguments; returns the summary.

    Example: ``dpo("runs/sft", "pairs.jsonl", "runs/dpo", beta=0.1, learning_rate=5e-6, max_steps=100)``.
    """
    values = {
        "model_name_or_path": str(model_name_or_path),
        "data": [str(d) for d in ([data] if isinstance(data, str | Path) else data)],
        "output_dir": str(output_dir),
        **options,
    }
    parsed = HfArgumentParser(ARGUMENT_CLASSES).parse_dict(values, allow_extra_keys=False)
    return run_dpo(*parsed)
