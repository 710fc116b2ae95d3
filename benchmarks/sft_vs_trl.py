#!/usr/bin/env python
"""Benchmark: hf-llmsys' instruction tuning against TRL 1.16's ``SFTTrainer``: speed, memory and learning.

Not a test (TRL is a reference, never imported by hf_llmsys): it measures, prints and optionally writes JSON. Both
sides get the same records, tokenizer, prompt template and ``max_length``. The label masks equal TRL's: that is a
parity test, ``tests/test_sft_vs_trl.py``.

1. Training throughput and memory (``--part speed``): real tokens per second and peak RSS of one epoch with each
   trainer, without and with packing, every run in a fresh process of its own, repetitions interleaved, medians,
   ratios ours / TRL by CPU time, by wall time and by peak RSS, the machine load (the metric and what is held
   equal: `speed_part`). Goals: tokens/s >= 1.1x TRL padded, >= 1.3x packed, peak RSS <= TRL's.

2. Learning side by side (``--part learn``; minutes of training, only when asked for): one randomly
   initialised tiny base per model type (`learn_base`, seeded; random so that the task is learnt from nothing and
   the trainers alone make the difference), the same synthetic records (reverse 3-6 digits, ``--learn_records``
   training, ``--held_out`` disjoint prompts), tokenizer (ours from ``llmsys train``, where TRL's EOS appended as
   text is the EOS id), template, steps, batch, learning rate and seed, trained by ``llmsys sft`` and by TRL's
   ``SFTTrainer``, padded and packed. Score: greedy exact match on the held-out prompts, each model decoded until
   its EOS by our decoding (`generate_responses`) and by a TRL user's (`decode_trl`: prompt text, ``generate`` with
   ``eos_token_id``): the cross-decoded scores tell decoding apart from training. Each side keeps its defaults
   unless ``--ours_option`` / ``--trl_option`` hold one equal (the schedule: ours cosine with 3% warmup, TRL's
   linear without). Target: |ours - TRL| <= 0.07.

   The setting (benchmarks/results/sft_vs_trl-learn.json, one torch thread, TRL given ours' cosine schedule with
   3% warmup): 800 steps, batch 32, lr 1e-3. There both trainers learn the task in every run: llmsys_gpt3 padded
   seeds 0-3 and packed seeds 0-2, llmsys_llama padded and packed seeds 0-1, 1.000 / 1.000 in each (gap 0).

   Why not lr 3e-3 for 400 steps (the first setting, kept in the results file): there llmsys_gpt3 is bimodal, a
   run either finds the solution or stays near 0, and float rounding decides which, not the trainer: traced step
   by step, both trainers draw the same rows with the same ids, masks, labels and learning rate, and their losses
   part only as rounding grows, as between our own trainer on one torch thread and on two. So the learn part
   trains on ``--threads`` (default 1) and records ``torch_threads``; compare over seeds (``--seed``,
   ``--merge_learn``).

    python -m benchmarks.sft_vs_trl --part speed --repeats 3 --threads 1
    python -m benchmarks.sft_vs_trl --part speed --lora_r 8 --train_records 12 --batch 4
    python -m benchmarks.sft_vs_trl --part learn --template short --max_length 64 --steps 800 --batch 32 \
        --learning_rate 1e-3 --trl_option lr_scheduler_type=cosine --trl_option warmup_steps=0.03 --json learn.json
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import logging
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch

import hf_llmsys  # noqa: F401  (registers the Auto classes)
from hf_llmsys.data import (
    ConversationTemplate,
    load_records,
    load_template,
)

from . import SHARED_DATA, argument_parser, child_environment, log, machine_limits, module_command, results_files

DEFAULT_RECORDS = SHARED_DATA / "alpaca_5000.json"
GOALS = {"padded": 1.1, "packed": 1.3}  # tokens/s >= 1.1x TRL's without packing, >= 1.3x with
MEMORY_GOAL = 1.0  # peak RSS <= TRL's
RATIO_NAMES = {"tokens_per_s": "ratio", "tokens_per_cpu_s": "cpu_ratio", "peak_rss_mb": "rss_ratio",
               "peak_rss_train_mb": "train_rss_ratio"}  # fmt: skip


# ---------------------------------------------------------------- inputs


def _gpt2_folder(workdir: Path) -> Path:
    src = SHARED_DATA / "tokenizers" / "gpt2"
    if not (src / "vocab.json").is_file():
        raise ValueError(f"--tokenizer gpt2: {src} has no vocab.json (set LLMSYS_DATA_DIR)")
    folder = workdir / "gpt2-tokenizer"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("vocab.json", "merges.txt"):
        (folder / name).write_bytes((src / name).read_bytes())
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer"}))
    return folder


def load_tokenizer(spec: str, workdir: Path):
    """``gpt2`` (the shared GPT-2 byte-level BPE) or a tokenizer folder."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(_gpt2_folder(workdir)) if spec == "gpt2" else spec)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def trl_rows(records: list[dict], template, seam_whitespace_in_completion: bool = False) -> dict:
    """TRL's prompt-completion columns for `records` under `template` (plus the record index); with
    `seam_whitespace_in_completion` the prompt's trailing whitespace stays in the completion, as our seam rule puts
    it (TRL then supervises the same tokens as ours: the learn part's ``--trl_seam ours``)."""
    if isinstance(template, ConversationTemplate):  # --template chat: one-turn conversations
        prompts = [template.messages(r)[:-1] for r in records]
        completions = [template.messages(r)[-1:] for r in records]
    else:
        prompts, completions = [], []
        for record in records:
            prompt, response = template.split(record)
            head = len(response) - len(response.lstrip())  # whitespace our split moved: give it back to the prompt
            head = 0 if seam_whitespace_in_completion else head
            prompts.append(prompt + response[:head])
            completions.append(response[head:])
    return {"prompt": prompts, "completion": completions, "record_index": list(range(len(records)))}


def trl_config(output_dir: str, max_length: int | None, **overrides):
    """SFTConfig with the settings both sides share: fp32, no gradient checkpointing, CPU, nothing reported."""
    from trl import SFTConfig

    settings = dict(
        output_dir=output_dir, max_length=max_length, completion_only_loss=True, report_to="none", use_cpu=True,
        bf16=False, fp16=False, gradient_checkpointing=False, save_strategy="no", logging_strategy="no",
        disable_tqdm=True, seed=0,
    )  # fmt: skip
    settings.update(overrides)
    return SFTConfig(**settings)


def results_table(results: dict) -> results_files.Table:
    """The results file's table: training speed (ours / TRL, tokens per second) and learning (greedy exact match per
    setting, mean over seeds)."""
    rows, Row = [], results_files.Row
    for mode, e in (results.get("speed") or {}).items():
        if not isinstance(e, dict) or "ratio" not in e:
            continue
        rows.append(Row(f"SFT training {mode}, tokens/s (goal >= {e['goal']}x)", f"{e['ours_tokens_per_s']:.0f}",
                        f"{e['trl_tokens_per_s']:.0f}", e["ratio"], headline=True))  # fmt: skip
        per_repeat = ", ".join(f"{r:.2f}x" for r in e["cpu_ratio_per_repeat"])
        rows.append(Row(f"SFT training {mode}, tokens per CPU s (per repetition {per_repeat})",
                        f"{e['ours_tokens_per_cpu_s']:.0f}", f"{e['trl_tokens_per_cpu_s']:.0f}", e["cpu_ratio"]))  # fmt: skip
        rows.append(Row(f"SFT training {mode}, peak RSS MiB (goal <= {e['memory_goal']}x TRL's)",
                        f"{e['ours_peak_rss_mb']:.0f}", f"{e['trl_peak_rss_mb']:.0f}", 1 / e["rss_ratio"]))  # fmt: skip
    for setting, entry in ((results.get("learn") or {}).get("by_setting") or {}).items():
        ours, trl = statistics.mean(entry["ours"]), statistics.mean(entry["trl"])
        rows.append(results_files.Row(f"greedy exact match, {setting} (seeds {entry['seeds']})",
                                      f"{ours:.3f}", f"{trl:.3f}", results_files.rate_ratio(ours, trl)))  # fmt: skip
    notes = []
    if speed := results.get("speed"):
        notes.append(f"Speed: {speed['train_records']} records, batch {speed['batch']}, max_length "
                     f"{speed['max_length']}, lora_r {speed['lora_r']}, {speed['threads']} torch threads, "
                     f"{speed['repeats']} repetitions, each run a fresh process.")  # fmt: skip
    if learn := results.get("learn"):
        notes.append(f"Learning: task {learn.get('task')}, {learn.get('held_out')} held-out prompts, target "
                     f"|ours - TRL| <= {learn.get('target')}.")  # fmt: skip
    trl_version = (results.get("learn") or {}).get("trl_version", "")
    return results_files.Table("Instruction tuning: hf-llmsys against TRL", f"TRL {trl_version}".strip(), rows, notes)


# ---------------------------------------------------------------- speed


def build_base(spec: str, tokenizer, workdir: Path) -> str:
    """The base model folder both trainers start from: ``tiny`` (a random transformers Llama) or a folder."""
    if spec != "tiny":
        return spec
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
    )  # fmt: skip
    folder = workdir / "base-tiny-llama"
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def _write_records(records: list[dict], path: Path) -> str:
    path.write_text(json.dumps(records), encoding="utf-8")
    return str(path)


def current_rss_mb() -> float:
    """Resident set size of this process now, in MiB (Linux /proc)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB: its own high-water mark (``machine_limits``: not
    ``ru_maxrss``, which a child inherits from its parent on Linux)."""
    return machine_limits.self_peak_rss() / 2**20


@contextlib.contextmanager
def timed_train(record: dict):
    """Time every ``Trainer.train`` call inside (wall and process CPU seconds, the latter comparable on a shared
    machine) and note the RSS when training starts and the process's peak at its end: one hook for both sides."""
    from transformers import Trainer

    original = Trainer.train

    def train(self, *a, **kw):
        record["rss_train_start_mb"] = current_rss_mb()
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return original(self, *a, **kw)
        finally:
            record["wall_s"] = time.perf_counter() - wall
            record["cpu_s"] = time.process_time() - cpu
            record["peak_rss_train_mb"] = peak_rss_mb()

    Trainer.train = train
    try:
        yield record
    finally:
        Trainer.train = original


def train_ours(base: str, train_file: str, val_file: str, out: Path, args, packing: bool, **options) -> dict:
    """`llmsys sft` through its Python API (no generations, no checkpoints): the settings both sides share, then
    `options`, then ``--ours_option``; sft()'s results."""
    from hf_llmsys.training.sft import sft

    shared = dict(
        validation_data=val_file, template=args.template, max_length=args.max_length, packing=packing,
        per_device_train_batch_size=args.batch, learning_rate=args.learning_rate, num_generation_examples=0,
        save_strategy="no", report_to="none", logging_steps=10**6, overwrite_output_dir=True, disable_tqdm=True,
        use_cpu=True,
    )  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):
        return sft(base, train_file, str(out), **{**shared, **options, **args.ours_option})


def train_trl(base: str, records: list[dict], tokenizer, template, out: Path, args, packing: bool, seam: bool = False,
              peft_config=None, **options):  # fmt: skip
    """TRL's ``SFTTrainer`` on the same base, records, template, max_length, batch and learning rate (`options`:
    further SFTConfig settings): (trainer, its train() output)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, set_seed
    from trl import SFTTrainer

    config = trl_config(str(out), args.max_length, packing=packing, per_device_train_batch_size=args.batch,
                        learning_rate=args.learning_rate, **options)  # fmt: skip
    set_seed(config.seed)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        trainer = SFTTrainer(
            model=AutoModelForCausalLM.from_pretrained(base), args=config, processing_class=tokenizer,
            train_dataset=Dataset.from_dict(trl_rows(records, template, seam)), peft_config=peft_config,
        )  # fmt: skip
        return trainer, trainer.train()


def run_ours(base: str, train_file: str, val_file: str, args, packing: bool, out: Path) -> dict:
    """One timed epoch of ours: the Trainer's runtime and memory, the real tokens, steps and rows."""
    lora = {"lora_r": args.lora_r, "lora_alpha": 2 * args.lora_r} if args.lora_r else {}
    with timed_train({}) as timing:
        results = train_ours(base, train_file, val_file, out, args, packing, num_train_epochs=1, seed=0, **lora)
    rows = results.get("packed_rows") or results["train_examples"]
    return {"tokens": results["train_tokens"], "trainer_tokens": results["tokens_seen"],
            "steps": results["global_step"], "rows": rows, **timing}  # fmt: skip


def run_trl(base: str, records: list[dict], tokenizer, template, args, packing: bool, out: Path) -> dict:
    """One timed epoch of TRL's (ours' cosine schedule with 3% warmup; LoRA as PEFT's ``all-linear``)."""
    peft_config = None
    if args.lora_r:
        from peft import LoraConfig

        peft_config = LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, lora_dropout=0.05,
                                 target_modules="all-linear", task_type="CAUSAL_LM")  # fmt: skip
    with timed_train({}) as timing:
        trainer, train_out = train_trl(
            base, records, tokenizer, template, out, args, packing, peft_config=peft_config, num_train_epochs=1,
            lr_scheduler_type="cosine", warmup_steps=0.03, include_num_input_tokens_seen="non_padding",
        )  # fmt: skip
    ids = trainer.train_dataset["input_ids"]  # TRL's prepared rows (packed: concatenated examples, no padding)
    return {"tokens": sum(len(x) for x in ids), "trainer_tokens": int(trainer.state.num_input_tokens_seen),
            "steps": train_out.global_step, "rows": len(ids), **timing}  # fmt: skip


MODES = {"padded": False, "packed": True}


def worker(spec_file: str) -> None:
    """``--worker SPEC``: one measured training run in this fresh process, so that its peak RSS (VmHWM) is its own;
    prints its figures as one JSON line (``peak_rss_mb``: the whole process's, ``peak_rss_train_mb``: up to the
    end of ``Trainer.train``; ours evaluates afterwards, TRL does not)."""
    spec = json.loads(Path(spec_file).read_text())
    torch.set_num_threads(spec["threads"])
    quiet()
    args = argparse.Namespace(**spec["args"])
    workdir, packing = Path(spec["workdir"]), MODES[spec["mode"]]
    load = os.getloadavg()
    if spec["side"] == "ours":
        run = run_ours(spec["base"], spec["train_file"], spec["val_file"], args, packing, Path(spec["out"]))
    else:
        tokenizer = load_tokenizer(args.tokenizer, workdir)
        template = load_template(args.template, tokenizer)
        records = json.loads(Path(spec["train_file"]).read_text(encoding="utf-8"))
        run = run_trl(spec["base"], records, tokenizer, template, args, packing, Path(spec["out"]))
    run.update(peak_rss_mb=peak_rss_mb(), pid=os.getpid(), load_start=load[0], load_end=os.getloadavg()[0])
    print(json.dumps(run), flush=True)


def spawn_run(spec: dict, workdir: Path) -> dict:
    """Run `worker` for `spec` in a new Python process (same interpreter, environment and path) and parse it."""
    import subprocess

    spec_file = workdir / f"spec-{spec['side']}-{spec['mode']}-{spec['name']}.json"
    spec_file.write_text(json.dumps(spec))
    env = child_environment({"OMP_NUM_THREADS": str(spec["threads"]), "TOKENIZERS_PARALLELISM": "false"})
    done = subprocess.run([*module_command(__spec__.name), "--worker", str(spec_file)],
                          capture_output=True, text=True, env=env, check=False)  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{spec['side']} {spec['mode']} run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def speed_part(args, workdir: Path) -> dict:
    """Real tokens per second and peak memory of one training epoch, ours vs TRL, without and with packing.

    Tokens are the lengths of the examples each side's prepared training set holds (no padding), timed inside
    ``Trainer.train`` by the same hook on both sides (`timed_train`): model loading, tokenization and our
    evaluation are outside it. Per mode: medians over repetitions of tokens per CPU second (robust on a shared
    machine) and per wall second, and the peak RSS of each run's own process (`worker`), with ratios ours / TRL.
    Held equal: base folder, records, template, max_length, rows per batch, optimiser, schedule, seed; fp32, no
    gradient checkpointing, CPU, ``--threads`` torch threads (default 1: CPU time is then the work done). Packing:
    both sides pack best-fit decreasing into rows of max_length, so both take the same steps over the same tokens.
    LoRA (``--lora_r``): rank r, alpha 2r, dropout 0.05, each side's default target modules. Not held equal, on
    purpose: TRL flattens a batch into one row and computes the LM head at every position, ours keeps rows and
    computes it at supervised positions only. Repetitions interleave, the side that goes first alternating; each
    run is a fresh process that pays its own first-step costs, so there is no warm-up run.
    """
    load_before = os.getloadavg()
    tokenizer = load_tokenizer(args.tokenizer, workdir)
    records, _ = load_records(args.records, skip_invalid=True)
    train, held_out = records[: args.train_records], records[args.train_records : args.train_records + 8]
    base = build_base(args.model, tokenizer, workdir)
    train_file = _write_records(train, workdir / "train.json")
    val_file = _write_records(held_out, workdir / "val.json")
    modes = [m for m in MODES if m in args.modes]

    def one_run(side: str, mode: str, name: str) -> dict:
        spec = dict(side=side, mode=mode, name=name, base=base, train_file=train_file, val_file=val_file,
                    out=str(workdir / f"run-{side}-{mode}-{name}"), workdir=str(workdir), threads=args.threads,
                    args={k: v for k, v in vars(args).items() if k != "json"})  # fmt: skip
        return spawn_run(spec, workdir)

    runs = {mode: {"ours": [], "trl": []} for mode in modes}
    for rep in range(args.repeats):
        for mode in modes:
            for side in ("ours", "trl") if rep % 2 == 0 else ("trl", "ours"):
                run = one_run(side, mode, str(rep))
                run["tokens_per_s"] = run["tokens"] / run["wall_s"]
                run["tokens_per_cpu_s"] = run["tokens"] / run["cpu_s"]
                runs[mode][side].append(run)
                log(f"  rep {rep} {mode} {side}: {run['tokens_per_s']:.1f} tokens/s, load {run['load_end']:.1f}")
    summary = {}
    for mode in modes:
        entry = {"goal": GOALS[mode], "memory_goal": MEMORY_GOAL, "runs": runs[mode]}
        for key in ("tokens_per_s", "tokens_per_cpu_s", "peak_rss_mb", "peak_rss_train_mb"):
            median = {side: statistics.median(r[key] for r in runs[mode][side]) for side in ("ours", "trl")}
            entry.update({f"ours_{key}": median["ours"], f"trl_{key}": median["trl"]})
            entry[RATIO_NAMES[key]] = median["ours"] / median["trl"]
        # per repetition (the two sides ran back to back): how stable the ratio is
        entry["cpu_ratio_per_repeat"] = [o["tokens_per_cpu_s"] / t["tokens_per_cpu_s"]
                                         for o, t in zip(runs[mode]["ours"], runs[mode]["trl"], strict=True)]  # fmt: skip
        entry["steps"] = {side: runs[mode][side][0]["steps"] for side in ("ours", "trl")}
        summary[mode] = entry
    load_after = os.getloadavg()
    return {
        "model": args.model, "tokenizer": args.tokenizer, "template": args.template, "max_length": args.max_length,
        "batch": args.batch, "train_records": len(train), "lora_r": args.lora_r, "repeats": args.repeats,
        "threads": args.threads, "ours_options": args.ours_option, "loadavg_before": list(load_before),
        "loadavg_after": list(load_after), "cpus": os.cpu_count(), **summary,
    }  # fmt: skip


# ---------------------------------------------------------------- learning side by side

LEARN_INSTRUCTION = "Reverse the digits."
LEARN_TARGET = 0.07  # greedy exact match of the two trainers within this
LEARN_SHAPE = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 64}


def reverse_digit_records(n: int, seed: int, lengths=(3, 6), exclude=frozenset()) -> list[dict]:
    """`n` distinct records of the synthetic task: ``input`` a random digit string, ``output`` the same reversed."""
    import random

    rng, seen, records = random.Random(seed), set(exclude), []
    while len(records) < n:
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(*lengths)))
        if digits not in seen:
            seen.add(digits)
            records.append({"instruction": LEARN_INSTRUCTION, "input": digits, "output": digits[::-1]})
    return records


def learn_tokenizer(template):
    """Our ``llmsys train`` tokenizer (byte-level BPE, `train_bpe_tokenizer`) trained on tinyshakespeare and the
    template's own words: the template text becomes a few tokens, every digit stays one byte token."""
    from hf_llmsys.data.tokenizer import train_bpe_tokenizer

    text = (SHARED_DATA / "tinyshakespeare.txt").read_text(encoding="utf-8")[:300_000]
    fixed = "".join(template.split({"instruction": LEARN_INSTRUCTION, "input": "", "output": ""}))
    texts = [text[i : i + 2000] for i in range(0, len(text), 2000)] + [fixed] * 200
    return train_bpe_tokenizer(texts, vocab_size=512)


def learn_base(model_type: str, tokenizer, folder: Path, seed: int = 0) -> str:
    """A randomly initialised tiny model of `model_type` (seeded), saved with its tokenizer: the one base both
    trainers start from (a random base: the task is learnt from nothing, so the trainers alone make the difference)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    ids = {k: getattr(tokenizer, k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    config = AutoConfig.for_model(model_type, vocab_size=len(tokenizer), **LEARN_SHAPE, **ids)
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def decode_ours(model, tokenizer, template, records: list[dict], max_length: int) -> list[str]:
    """Our decoding (`generate_responses`: the training prefix, left-padded batches, stop at the EOS)."""
    from hf_llmsys.evaluation.greedy_answers import generate_responses

    return generate_responses(model, tokenizer, template, records, max_new_tokens=16, max_length=max_length)


@torch.no_grad()
def decode_trl(model, tokenizer, template, records: list[dict], batch: int = 16) -> list[str]:
    """A TRL user's decoding: the prompt text tokenized, left-padded batches, ``generate`` with
    ``eos_token_id=tokenizer.eos_token_id`` (TRL's saved generation config need not stop there)."""
    prompts = trl_rows(records, template)["prompt"]
    left = copy.copy(tokenizer)
    left.padding_side = "left"
    model.eval()
    answers = []
    for first in range(0, len(prompts), batch):
        enc = left(prompts[first : first + batch], return_tensors="pt", padding=True, add_special_tokens=False)
        out = model.generate(**enc, max_new_tokens=16, do_sample=False, eos_token_id=tokenizer.eos_token_id,
                             pad_token_id=tokenizer.pad_token_id)  # fmt: skip
        answers += tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return answers


def learn_part(args, workdir: Path) -> dict:
    """Part 3: the same base, records, steps, batch and learning rate trained by ``llmsys sft`` and by TRL's
    ``SFTTrainer``; greedy exact match on held-out prompts, each model decoded by both decoders (so a difference
    in decoding is told apart from one in training). Each side keeps its own defaults otherwise (schedule, warmup,
    ...); ``--ours_option`` / ``--trl_option`` override them for controlled experiments. Both train on
    ``--threads`` torch threads (recorded): the float rounding, which decides llmsys_gpt3's runs, depends on it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        return _learn_runs(args, workdir)
    finally:
        torch.set_num_threads(threads)


def _learn_runs(args, workdir: Path) -> dict:
    from transformers import AutoModelForCausalLM

    from hf_llmsys.evaluation.greedy_answers import exact_match

    template = load_template(args.template)
    tokenizer = learn_tokenizer(template)
    train = reverse_digit_records(args.learn_records, seed=1)
    held_out = reverse_digit_records(args.held_out, seed=2, exclude={r["input"] for r in train})
    train_file = _write_records(train, workdir / "learn-train.json")
    val_file = _write_records(held_out, workdir / "learn-held-out.json")
    results = []
    import trl as trl_package

    settings = {
        "task": f"{LEARN_INSTRUCTION!r} of 3-6 digits", "template": args.template, "train_records": len(train),
        "held_out": len(held_out), "steps": args.steps, "batch": args.batch, "learning_rate": args.learning_rate,
        "max_length": args.max_length, "seed": args.seed, "shape": LEARN_SHAPE, "ours_options": args.ours_option,
        "trl_options": args.trl_option, "trl_seam": args.trl_seam, "torch_threads": torch.get_num_threads(),
        "trl_version": trl_package.__version__, "torch_version": torch.__version__, "target": LEARN_TARGET,
        "runs": results,
    }  # fmt: skip
    for model_type in args.learn_models:
        base = learn_base(model_type, tokenizer, workdir / f"learn-base-{model_type}", seed=args.seed)
        for mode in args.modes:
            torch.manual_seed(args.seed)
            start = time.perf_counter()
            packing, steps = MODES[mode], {"max_steps": args.steps, "seed": args.seed}
            ours_loss = train_ours(base, train_file, val_file, workdir / "ours", args, packing, **steps)["train_loss"]
            ours = AutoModelForCausalLM.from_pretrained(workdir / "ours")
            trainer, trained = train_trl(base, train, tokenizer, template, workdir / "trl", args, packing,
                                         args.trl_seam == "ours", **steps, **args.trl_option)  # fmt: skip
            trl, trl_loss = trainer.model, trained.training_loss
            scores = {}
            for side, model in (("ours", ours), ("trl", trl)):
                scores[side] = {
                    "ours_decoder": exact_match(decode_ours(model, tokenizer, template, held_out, args.max_length),
                                                held_out),
                    "trl_decoder": exact_match(decode_trl(model, tokenizer, template, held_out), held_out),
                }  # fmt: skip
            entry = {"model_type": model_type, "mode": mode, "ours": scores["ours"]["ours_decoder"],
                     "trl": scores["trl"]["trl_decoder"], "cross": scores, "ours_train_loss": ours_loss,
                     "trl_train_loss": trl_loss, "seconds": time.perf_counter() - start}  # fmt: skip
            entry["gap"] = entry["trl"] - entry["ours"]
            entry["within_target"] = abs(entry["gap"]) <= LEARN_TARGET
            results.append(entry)
            log(f"{model_type:12s} {mode:6s}: exact match ours {entry['ours']:.3f} / TRL {entry['trl']:.3f} (gap "
                f"{entry['gap']:+.3f}, target |gap| <= {LEARN_TARGET}); cross-decoded: ours' model by TRL's decoding "
                f"{scores['ours']['trl_decoder']:.3f}, TRL's by ours {scores['trl']['ours_decoder']:.3f}; train loss "
                f"ours {ours_loss:.4f} / TRL {trl_loss:.4f}; {entry['seconds']:.0f} s")  # fmt: skip
            if args.json:  # minutes per run: what is done so far survives an interrupted job
                Path(args.json).write_text(json.dumps({"learn": settings}, indent=2) + "\n")
    return settings


LEARN_SETTING = ("template", "steps", "batch", "learning_rate", "ours_options", "trl_options", "trl_seam",
                 "torch_threads")  # fmt: skip
OLDER_FILES = {"trl_seam": "trl", "torch_threads": None}  # the value of a key a file predates (None: not recorded)


def merge_learn_results(paths: list[str]) -> dict:
    """Several ``--part learn`` JSON files, or merged results (the results file), as one result: every run with the
    settings it ran under (`LEARN_SETTING`), and per model type, mode and setting the scores over seeds."""
    parts = [{**OLDER_FILES, **json.loads(Path(path).read_text())["learn"]} for path in paths]
    runs = []
    for part in parts:
        setting = {} if "by_setting" in part else {"seed": part["seed"], **{k: part[k] for k in LEARN_SETTING}}
        runs += [{**OLDER_FILES, **run, **setting} for run in part["runs"]]
    groups: dict[str, list[dict]] = {}
    for run in runs:
        key = " ".join([run["model_type"], run["mode"]] + [f"{k}={json.dumps(run[k])}" for k in LEARN_SETTING])
        groups.setdefault(key, []).append(run)
    table = {key: {"seeds": [r["seed"] for r in group], **{side: [r[side] for r in group] for side in ("ours", "trl")},
                   "mean_gap": statistics.mean(r["gap"] for r in group)} for key, group in groups.items()}  # fmt: skip
    shared = ("task", "held_out", "train_records", "max_length", "shape", "trl_version", "torch_version", "target")
    return {**{k: parts[0][k] for k in shared}, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "by_setting": table, "runs": runs}  # fmt: skip


# ---------------------------------------------------------------- command line


def parse_args(argv=None) -> argparse.Namespace:
    parser = argument_parser(__spec__.name, __doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("speed", "learn"), default="speed")
    parser.add_argument("--records", default=str(DEFAULT_RECORDS), help="Alpaca records (JSON / JSONL / folder)")
    parser.add_argument("--tokenizer", default="gpt2", help="gpt2 or a tokenizer folder")
    parser.add_argument("--template", default="alpaca", help="alpaca, short, chat or a template file")
    parser.add_argument("--max_length", type=int, default=256)
    parser.add_argument("--model", default="tiny", help="speed part: tiny (random 4-layer Llama) or a folder")
    parser.add_argument("--train_records", type=int, default=64, help="speed part: records trained (one epoch)")
    parser.add_argument("--batch", type=int, default=8, help="speed part: per-device batch size")
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--lora_r", type=int, default=0, help="speed part: LoRA rank (0: full fine-tuning)")
    parser.add_argument("--repeats", type=int, default=3, help="speed part: interleaved repetitions")
    parser.add_argument("--threads", type=int, default=1,
                        help="speed and learn parts: torch threads for both trainers (learn: the float rounding, which "
                        "decides llmsys_gpt3's runs, depends on it)")  # fmt: skip
    parser.add_argument("--ours_option", action="append", default=[], metavar="KEY=VALUE",
                        help="speed part: an extra sft() option for our side (ablations), e.g. "
                        "logits_on_labels_only=false or packing_strategy=flatten; repeatable")  # fmt: skip
    parser.add_argument("--modes", nargs="+", choices=tuple(MODES), default=list(MODES),
                        help="speed and learn parts: padded and / or packed")  # fmt: skip
    parser.add_argument("--trl_option", action="append", default=[], metavar="KEY=VALUE",
                        help="learn part: an extra SFTConfig option for TRL's side (ablations); repeatable")  # fmt: skip
    parser.add_argument("--steps", type=int, default=800, help="learn part: optimizer steps of each trainer")
    parser.add_argument("--trl_seam", choices=("trl", "ours"), default="trl",
                        help="learn part, text templates: TRL's prompt keeps its trailing space (trl: what a TRL user "
                        "writes) or the space opens the completion, supervised as by our seam rule (ours)")  # fmt: skip
    parser.add_argument("--learn_records", type=int, default=4000, help="learn part: training records")
    parser.add_argument("--held_out", type=int, default=200, help="learn part: held-out prompts scored")
    parser.add_argument("--learn_models", nargs="+", default=["llmsys_llama", "llmsys_gpt3"],
                        help="learn part: model types trained")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="learn part: seed of the base model and both trainers")
    parser.add_argument("--merge_learn", nargs="+", metavar="JSON", help="learn part: merge these results into --json")
    parser.add_argument("--json", metavar="OUT", help="write all results to this JSON file")
    parser.add_argument("--worker", metavar="SPEC", help=argparse.SUPPRESS)  # one measured run (speed part)
    args = parser.parse_args(argv)
    if args.worker:
        return args
    for flag in ("ours_option", "trl_option"):
        options = {}
        for item in getattr(args, flag):
            key, sep, value = item.partition("=")
            if not sep or not key:
                parser.error(f"--{flag} {item!r}: give KEY=VALUE")
            try:
                options[key] = json.loads(value)
            except json.JSONDecodeError:
                options[key] = value
        setattr(args, flag, options)
    if args.max_length < 1 or args.threads < 1 or args.repeats < 1:
        parser.error("--max_length, --threads and --repeats must be >= 1")
    return args


def quiet() -> None:
    """No progress bars or per-example warnings from datasets / transformers / TRL in the printed report."""
    import datasets
    from transformers.utils import logging as hf_logging

    datasets.disable_progress_bars()
    hf_logging.set_verbosity_error()
    for name in ("trl", "datasets"):
        logging.getLogger(name).setLevel(logging.ERROR)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.worker:
        worker(args.worker)
        return {}
    quiet()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.part == "speed":
            results["speed"] = speed_part(args, Path(tmp))
        if args.part == "learn" and args.merge_learn:
            results["learn"] = merge_learn_results(args.merge_learn)
        elif args.part == "learn":  # minutes of training: only when asked for
            results["learn"] = learn_part(args, Path(tmp))
    table = results_table(results)
    results_files.report(args.json, "sft_vs_trl", results, table, say=log)
    return results


if __name__ == "__main__":
    main()
