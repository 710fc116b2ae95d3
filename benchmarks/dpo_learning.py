#!/usr/bin/env python
"""Benchmark: does `llmsys dpo` teach a preference, and does TRL's own DPOTrainer, side by side, reach the same?

Not a test (tests/test_dpo_learning.py runs it, slow, and holds its claims): it trains, measures, prints and writes
the results file through `results_files` (benchmarks/results/dpo_learning-cpu.json and .md).

The task (`make_task`, seeded): "Rearrange the digits." with three digits as input (palindromes left out: their two
answers would be equal). The rule: the answer is the digits REVERSED. The SFT model does not follow it: a random
tiny base per model type is instruction-tuned by `llmsys sft` on records whose answer is the reversed digits only
for ``--rule_share`` of them (default 20%) and the digits as given for the rest, so greedy decoding mostly copies.
Preference pairs: chosen = reversed, rejected = copied. Prompts are disjoint: ``--sft_prompts`` for SFT, ``--pairs``
for DPO training, ``--held_out`` for every measurement (never trained on by either stage).

Then, from the same SFT folder with the same pairs, seed and settings (full tuning, ``--dpo_steps`` steps,
``--learning_rate``, ``--beta``, batch ``--batch``):

- ours: `llmsys dpo` (the job: the SFT folder's saved template renders the prompts);
- TRL: its `DPOTrainer` run as a TRL user runs it on the same folder, the pairs written as rendered prompt text and
  answers (`trl_row`).

Measured on the held-out pairs, the same way for both models (`measure`): the share of greedy answers that follow
the rule (and that copy), decoded by `generate_responses` from the SFT prompt; the preference accuracy (pairs whose
chosen answer gets the higher summed log-probability, by a plain forward pass); and TRL's own evaluation against the
reference (DPO loss, reward margin and reward accuracy: ours from the job's summary, TRL's from its ``evaluate``).

Claims (``checks`` in the JSON, each True or False): after DPO the reward margin is positive, the preference
accuracy and the rule-following share rose over the SFT model's; TRL side by side reaches the same within
``TOLERANCE`` (0.05 absolute on the shares and accuracies, 5% relative on the margin and the loss). Both run TRL's
loss on the same ids (tests/test_dpo_vs_trl.py: bit-identical first steps), so the tolerance is for float rounding
grown over hundreds of steps, never reached in the committed runs (see the file).

    python -m benchmarks.dpo_learning --json benchmarks/results/dpo_learning-cpu.json
    python -m benchmarks.dpo_learning --model_types llmsys_llama --dpo_steps 100    # quicker, fewer claims met
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import tempfile
import time
from pathlib import Path

import torch

from . import argument_parser, results_files

INSTRUCTION = "Rearrange the digits."
TOLERANCE = {"share": 0.05, "relative": 0.05}
MAX_LENGTH = 64


def reverse(digits: str) -> str:
    return " ".join(digits.split()[::-1])


def make_task(seed: int, sft_prompts: int, pairs: int, held_out: int, rule_share: float) -> dict:
    """SFT records (the rule for `rule_share` of them), DPO pairs and held-out pairs on disjoint prompts."""
    rng = random.Random(seed)
    inputs = [" ".join(f"{i:03d}") for i in range(1000)]
    inputs = [x for x in inputs if x[0] != x[-1]]  # no palindromes: chosen and rejected must differ
    rng.shuffle(inputs)
    if sft_prompts + pairs + held_out > len(inputs):
        raise ValueError(f"--sft_prompts + --pairs + --held_out must be <= {len(inputs)} distinct prompts")
    sft_in = inputs[:sft_prompts]
    pair_in = inputs[sft_prompts : sft_prompts + pairs]
    held_in = inputs[sft_prompts + pairs : sft_prompts + pairs + held_out]
    as_pairs = lambda xs: [{"prompt": INSTRUCTION, "input": x, "chosen": reverse(x), "rejected": x} for x in xs]  # noqa: E731
    return {
        "sft": [
            {"instruction": INSTRUCTION, "input": x, "output": reverse(x) if rng.random() < rule_share else x}
            for x in sft_in
        ],  # fmt: skip
        "pairs": as_pairs(pair_in),
        "held_out": as_pairs(held_in),
    }


def build_sft_model(model_type: str, task: dict, workdir: Path, args) -> Path:
    """A random tiny base of `model_type`, instruction-tuned by `llmsys sft` on the task's mixed records."""
    from hf_llmsys.training import sft
    from tests.sft_fixtures import save_base_model, task_tokenizer  # the SFT tests' tiny bases

    (workdir / "sft.json").write_text(json.dumps(task["sft"]))
    tokenizer = task_tokenizer(task["sft"])
    base = save_base_model(workdir / f"base-{model_type}", model_type, tokenizer, seed=args.seed)
    out = workdir / f"sft-{model_type}"
    sft(base, str(workdir / "sft.json"), out, template="short", max_length=MAX_LENGTH, max_steps=args.sft_steps,
        per_device_train_batch_size=32, learning_rate=3e-3, warmup_steps=0.05, seed=args.seed,
        num_generation_examples=0, report_to="none", disable_tqdm=True, save_steps=100_000, logging_steps=100)  # fmt: skip
    return out


def trl_row(record: dict, template) -> dict:
    """A pair as a TRL user writes it: the prompt rendered by the template, the answers as the template splits."""
    sides = [template.split({"instruction": record["prompt"], "input": record["input"], "output": record[s]})
             for s in ("chosen", "rejected")]  # fmt: skip
    return {"prompt": sides[0][0], "chosen": sides[0][1], "rejected": sides[1][1]}


@torch.no_grad()
def measure(model, tokenizer, template, held_out: list[dict]) -> dict:
    """Greedy rule-following / copying shares and the preference accuracy on the held-out pairs (module doc)."""
    from hf_llmsys.data.preference_pairs import PreferencePairEncoder
    from hf_llmsys.data.preference_records import check_preference_records
    from hf_llmsys.evaluation.greedy_answers import generate_responses

    model.eval()
    records = [{"instruction": r["prompt"], "input": r["input"], "output": r["chosen"]} for r in held_out]
    answers = [a.strip() for a in generate_responses(model, tokenizer, template, records, 8, MAX_LENGTH)]
    encoder = PreferencePairEncoder(tokenizer, template, MAX_LENGTH)
    preferred = []
    for record in check_preference_records(held_out)[0]:
        pair, _ = encoder.encode(record)
        sums = []
        for side in ("chosen_ids", "rejected_ids"):
            ids = torch.tensor([pair["prompt_ids"] + pair[side]])
            logps = torch.log_softmax(model(ids).logits[0, :-1].float(), -1).gather(1, ids[0, 1:, None])[:, 0]
            sums.append(logps[len(pair["prompt_ids"]) - 1 :].sum().item())
        preferred.append(sums[0] > sums[1])
    n = len(held_out)
    return {
        "rule_share": sum(a == r["chosen"] for a, r in zip(answers, held_out, strict=True)) / n,
        "copy_share": sum(a == r["rejected"] for a, r in zip(answers, held_out, strict=True)) / n,
        "preference_accuracy": sum(preferred) / n,
        "answers": answers[:5],
    }


def dpo_settings(args) -> dict:
    return {
        "max_steps": args.dpo_steps, "per_device_train_batch_size": args.batch, "per_device_eval_batch_size": 16,
        "learning_rate": args.learning_rate, "beta": args.beta, "seed": args.seed, "logging_steps": 50,
        "report_to": "none", "disable_tqdm": True, "max_length": MAX_LENGTH,
    }  # fmt: skip


def run_ours(sft_folder: Path, workdir: Path, args) -> tuple[dict, dict]:
    """`llmsys dpo` from the SFT folder: (its summary, `measure` of the saved folder)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_llmsys.data import load_template
    from hf_llmsys.training.dpo import dpo

    out = workdir / f"dpo-{sft_folder.name}"
    start = time.time()
    summary = dpo(sft_folder, workdir / "pairs.json", out, validation_data=str(workdir / "held_out.json"),
                  num_generation_examples=0, save_steps=100_000, **dpo_settings(args))  # fmt: skip
    seconds = time.time() - start
    tokenizer = AutoTokenizer.from_pretrained(out)
    measured = measure(AutoModelForCausalLM.from_pretrained(out), tokenizer, load_template(out, tokenizer),
                       args.task["held_out"])  # fmt: skip
    figures = {k: summary["held_out_after"][k] for k in ("dpo_loss", "reward_margin", "reward_accuracy")}
    return {
        **figures,
        "summary_preference_accuracy": summary["preference_accuracy_after"],
        "seconds": seconds,
    }, measured


def run_trl(sft_folder: Path, workdir: Path, args) -> tuple[dict, dict]:
    """TRL's DPOTrainer on the same folder, pairs and settings: (its evaluation, `measure` of its model)."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    import hf_llmsys  # noqa: F401  (our architectures, for the Auto classes TRL loads the folder with)
    from hf_llmsys.data import load_template

    tokenizer = AutoTokenizer.from_pretrained(sft_folder)
    template = load_template(sft_folder, tokenizer)
    rows = lambda records: Dataset.from_list([trl_row(r, template) for r in records])  # noqa: E731
    config = DPOConfig(output_dir=str(workdir / f"trl-{sft_folder.name}"), bf16=False, activation_checkpointing=False,
                       save_strategy="no", **dpo_settings(args))  # fmt: skip
    start = time.time()
    trainer = DPOTrainer(model=str(sft_folder), args=config, train_dataset=rows(args.task["pairs"]),
                         eval_dataset=rows(args.task["held_out"]), processing_class=tokenizer)  # fmt: skip
    trainer.train()
    seconds = time.time() - start
    evaluated = trainer.evaluate()
    figures = {"dpo_loss": evaluated["eval_loss"], "reward_margin": evaluated["eval_rewards/margins"],
               "reward_accuracy": evaluated["eval_rewards/accuracies"], "seconds": seconds}  # fmt: skip
    return figures, measure(trainer.model, tokenizer, template, args.task["held_out"])


def checks(before: dict, ours: dict, ours_measured: dict, trl: dict, trl_measured: dict) -> dict:
    """The claims of the module doc, each True or False."""
    near = lambda a, b: abs(a - b) <= TOLERANCE["share"]  # noqa: E731
    rel = lambda a, b: abs(a - b) <= TOLERANCE["relative"] * max(abs(a), abs(b), 1e-9)  # noqa: E731
    return {
        "reward_margin_positive": ours["reward_margin"] > 0,
        "preference_accuracy_rose": ours_measured["preference_accuracy"] > before["preference_accuracy"],
        "rule_share_rose": ours_measured["rule_share"] > before["rule_share"],
        "trl_rule_share_within_tolerance": near(ours_measured["rule_share"], trl_measured["rule_share"]),
        "trl_preference_accuracy_within_tolerance": near(
            ours_measured["preference_accuracy"], trl_measured["preference_accuracy"]
        ),  # fmt: skip
        "trl_reward_accuracy_within_tolerance": near(ours["reward_accuracy"], trl["reward_accuracy"]),
        "trl_reward_margin_within_tolerance": rel(ours["reward_margin"], trl["reward_margin"]),
        "trl_dpo_loss_within_tolerance": rel(ours["dpo_loss"], trl["dpo_loss"]),
    }


def run_model_type(model_type: str, workdir: Path, args) -> dict:
    print(f"{model_type}: llmsys sft on {len(args.task['sft'])} mixed records ({args.sft_steps} steps)", flush=True)
    sft_folder = build_sft_model(model_type, args.task, workdir, args)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_llmsys.data import load_template

    tokenizer = AutoTokenizer.from_pretrained(sft_folder)
    before = measure(AutoModelForCausalLM.from_pretrained(sft_folder), tokenizer, load_template(sft_folder, tokenizer),
                     args.task["held_out"])  # fmt: skip
    print(f"  SFT model: rule {before['rule_share']:.3f}, copy {before['copy_share']:.3f}, preference accuracy "
          f"{before['preference_accuracy']:.3f}", flush=True)  # fmt: skip
    ours, ours_measured = run_ours(sft_folder, workdir, args)
    trl, trl_measured = run_trl(sft_folder, workdir, args)
    for name, figures, measured in (("ours", ours, ours_measured), ("TRL ", trl, trl_measured)):
        print(f"  {name}: rule {measured['rule_share']:.3f}, copy {measured['copy_share']:.3f}, preference accuracy "
              f"{measured['preference_accuracy']:.3f}, reward margin {figures['reward_margin']:.4f}, reward accuracy "
              f"{figures['reward_accuracy']:.3f}, DPO loss {figures['dpo_loss']:.4f}, {figures['seconds']:.1f} s",
              flush=True)  # fmt: skip
    claims = checks(before, ours, ours_measured, trl, trl_measured)
    print(f"  claims: {', '.join(k for k, v in claims.items() if v)}; not met: "
          f"{', '.join(k for k, v in claims.items() if not v) or 'none'}", flush=True)  # fmt: skip
    return {"before": before, "ours": {**ours, **ours_measured}, "trl": {**trl, **trl_measured}, "checks": claims}


def results_table(results: dict) -> results_files.Table:
    """Per model type: the held-out figures before (the SFT model) and after DPO, ours against TRL's DPOTrainer."""
    rows = []
    for model_type, run in results["runs"].items():
        before, ours, trl = run["before"], run["ours"], run["trl"]
        for key, label in (("rule_share", "greedy answers following the rule"),
                           ("preference_accuracy", "preference accuracy (chosen more likely)")):  # fmt: skip
            rows.append(results_files.Row(
                f"{model_type}: {label}, SFT model -> after DPO", f"{before[key]:.3f} -> {ours[key]:.3f}",
                f"{before[key]:.3f} -> {trl[key]:.3f}", results_files.rate_ratio(ours[key], trl[key])))  # fmt: skip
        for key, label in (("reward_margin", "held-out reward margin"), ("reward_accuracy", "held-out reward accuracy"),
                           ("dpo_loss", "held-out DPO loss")):  # fmt: skip
            ratio = results_files.cost_ratio(ours[key], trl[key]) if key == "dpo_loss" else results_files.rate_ratio(
                ours[key], trl[key])  # fmt: skip
            rows.append(results_files.Row(f"{model_type}: {label} after DPO", f"{ours[key]:.4f}", f"{trl[key]:.4f}",
                                          ratio))  # fmt: skip
        met = [k for k, v in run["checks"].items() if v]
        rows.append(results_files.Row(f"{model_type}: claims met", f"{len(met)} of {len(run['checks'])}",
                                      "", None))  # fmt: skip
    s = results["settings"]
    notes = [
        f'Task: "{INSTRUCTION}" + three digits; the rule: answer reversed. The SFT model (llmsys sft, '
        f"{s['sft_steps']} steps) saw the rule in {s['rule_share']:.0%} of {s['sft_prompts']} records; DPO: "
        f"{s['pairs']} pairs (chosen reversed, rejected copied), {s['dpo_steps']} steps, batch {s['batch']}, "
        f"learning rate {s['learning_rate']}, beta {s['beta']}, full tuning, seed {s['seed']}, "
        f"{s['torch_threads']} torch thread(s); measured on {s['held_out']} held-out prompts seen by neither stage.",
        f"Side by side: TRL {results['trl_version']} DPOTrainer on the same SFT folder, pairs and settings. Tolerance: "
        f"{TOLERANCE['share']} absolute on shares and accuracies, {TOLERANCE['relative']:.0%} relative on margin and "
        "loss. The ratio column is ours / TRL (for the loss TRL / ours).",
    ]
    return results_files.Table("Preference tuning (DPO): hf-llmsys against TRL", f"TRL {results['trl_version']}",
                               rows, notes)  # fmt: skip


def quiet() -> None:
    """No progress bars or per-step logs from datasets / transformers / TRL in the printed report."""
    import datasets
    from transformers.utils import logging as hf_logging

    datasets.disable_progress_bars()
    hf_logging.set_verbosity_error()
    for name in ("trl", "datasets", "hf_llmsys"):
        logging.getLogger(name).setLevel(logging.ERROR)


def parse_args(argv=None):
    parser = argument_parser(__spec__.name, __doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_types", nargs="+", default=["llmsys_llama", "llmsys_gpt3"])
    parser.add_argument("--sft_steps", type=int, default=300)
    parser.add_argument("--dpo_steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--beta", type=float, default=0.1)
    parser.add_argument("--rule_share", type=float, default=0.2, help="share of SFT records that follow the rule")
    parser.add_argument("--sft_prompts", type=int, default=500)
    parser.add_argument("--pairs", type=int, default=300)
    parser.add_argument("--held_out", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (float rounding depends on it)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the models here (default: a temp folder)")
    parser.add_argument("--json", type=Path, default=None, help="write the results file (and its .md) here")
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    quiet()
    torch.set_num_threads(args.threads)
    import trl

    args.task = make_task(args.seed, args.sft_prompts, args.pairs, args.held_out, args.rule_share)
    with tempfile.TemporaryDirectory(prefix="dpo_learning-") as scratch:
        workdir = args.workdir or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "pairs.json").write_text(json.dumps(args.task["pairs"]))
        (workdir / "held_out.json").write_text(json.dumps(args.task["held_out"]))
        runs = {model_type: run_model_type(model_type, workdir, args) for model_type in args.model_types}
    settings = {k: getattr(args, k) for k in ("sft_steps", "dpo_steps", "batch", "learning_rate", "beta", "rule_share",
                                              "sft_prompts", "pairs", "held_out", "seed")}  # fmt: skip
    results = {"settings": {**settings, "torch_threads": torch.get_num_threads()}, "trl_version": trl.__version__,
               "tolerance": TOLERANCE, "runs": runs}  # fmt: skip
    if args.json:
        results = results_files.write(args.json, "dpo_learning", results, results_table(results))
        print(f"wrote {args.json} and {args.json.with_suffix('.md')}")
    return results


if __name__ == "__main__":
    main()
