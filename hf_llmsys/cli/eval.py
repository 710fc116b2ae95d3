"""`llmsys eval MODEL --tasks ...`: score a model on lm-evaluation-harness tasks, write lm-eval's results JSON.

    llmsys eval runs/sft --tasks hellaswag,arc_easy --limit 100        # lm-eval's tasks (their datasets: Hub or cache)
    llmsys eval runs/sft --tasks my_task.yaml --output_path results    # a task YAML of yours (dataset_path: json)
    llmsys eval runs/t5 --tasks my_task.yaml --num_fewshot 2 --batch_size 8

MODEL is a folder (or Hub id) of a causal LM or an encoder-decoder (llmsys_t5: lm-eval's seq2seq backend), or a
LoRA adapter folder of ``llmsys sft`` (scored on its base with the adapter on), loaded as every llmsys command
loads it (`data.pretrained_sources`), then handed to lm-eval as the model object
(`evaluation/lm_eval_tasks.py`: `harness_model`), so the scores equal
``lm_eval --model hf --model_args pretrained=MODEL,trust_remote_code=True`` on the same folder.
``--output_path`` gets what lm-eval's own ``--output_path`` writes (``<path>/<model>/results_<date>.json``, or
``<stem>_<date>.json`` for a path ending in .json; with ``--log_samples`` one samples JSONL per task); stdout gets
lm-eval's table. Every flag, task and data file is checked before the model loads; nothing is written unless the
evaluation finished.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .parsing import CommandParser

DTYPES = ("auto", "float32", "bfloat16", "float16")


def build_parser() -> argparse.ArgumentParser:
    """The flags of `llmsys eval` (values checked by `check_flags`)."""
    parser = CommandParser(prog="llmsys eval", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "model",
        metavar="MODEL",
        help="a saved model folder or Hub id (causal LM or encoder-decoder), or a LoRA adapter folder",
    )
    parser.add_argument("--tasks", required=True, nargs="+", metavar="TASK",
                        help="lm-eval task / group names or patterns (hellaswag, arc_*), task YAML files or folders of "
                        "them; comma-separated or several")  # fmt: skip
    parser.add_argument("--include_path",
                        help="a folder of task YAMLs whose task names --tasks may use")  # fmt: skip
    parser.add_argument("--num_fewshot", type=int,
                        help="examples in each prompt (default: each task's own, else 0)")  # fmt: skip
    parser.add_argument(
        "--limit",
        type=float,
        help="documents per task: a count (>= 1) or a fraction (< 1); for quick checks, not scores",
    )
    parser.add_argument("--batch_size", default="1",
                        help="requests per forward, or 'auto' (lm-eval finds the largest that fits)")  # fmt: skip
    parser.add_argument("--output_path",
                        help="where lm-eval's results JSON goes: a folder (<folder>/<model>/results_<date>.json) or "
                        "a .json path (<stem>_<date>.json); default: only the table on stdout")  # fmt: skip
    parser.add_argument("--log_samples", action="store_true",
                        help="also write every document's prompt, responses and scores "
                        "(needs --output_path)")  # fmt: skip
    parser.add_argument("--tokenizer", help="tokenizer folder (default: MODEL's)")
    parser.add_argument("--max_length", type=int,
                        help="the context lm-eval fits requests into (default: the model's, else 2048)")  # fmt: skip
    parser.add_argument("--apply_chat_template", action="store_true",
                        help="wrap each prompt in the tokenizer's chat template "
                        "(an instruction-tuned model)")  # fmt: skip
    parser.add_argument("--gen_kwargs",
                        help="generation settings of generate_until tasks, as lm-eval takes them: "
                        "max_gen_toks=64,temperature=0")  # fmt: skip
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N, mps (default: the GPU when there is one)")
    parser.add_argument("--dtype", default="auto", choices=DTYPES,
                        help="weights' dtype (auto: as saved)")  # fmt: skip
    parser.add_argument("--trust_remote_code", action="store_true",
                        help="let transformers run the model folder's own code (models not built into it)")  # fmt: skip
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line of `llmsys eval`."""
    return build_parser().parse_args(argv)


def batch_size_value(text: str) -> int | str:
    """--batch_size: an integer >= 1, or lm-eval's 'auto' / 'auto:N'."""
    if text == "auto" or text.startswith("auto:") and text[5:].isdigit():
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"--batch_size {text}: give an integer >= 1 or 'auto'")
    return value


def check_flags(args: argparse.Namespace) -> None:
    """ValueError naming the flag for a value no run can use, before anything is read or loaded."""
    args.batch_size = batch_size_value(args.batch_size)
    if args.num_fewshot is not None and args.num_fewshot < 0:
        raise ValueError(f"--num_fewshot {args.num_fewshot}: must be >= 0")
    if args.limit is not None and not args.limit > 0:
        raise ValueError(f"--limit {args.limit:g}: give a count of documents (>= 1) or a fraction in (0, 1)")
    if args.max_length is not None and args.max_length < 2:
        raise ValueError(f"--max_length {args.max_length}: must be >= 2 tokens")
    if args.log_samples and not args.output_path:
        raise ValueError("--log_samples writes files beside the results: give --output_path too")
    if args.gen_kwargs is not None and "=" not in args.gen_kwargs:
        raise ValueError(f"--gen_kwargs {args.gen_kwargs!r}: give key=value pairs, e.g. max_gen_toks=64,temperature=0")
    if args.output_path:
        check_output_path(args.output_path)


def check_output_path(output_path: str) -> None:
    """--output_path must be creatable and writable (lm-eval itself only logs a failed write)."""
    path = Path(output_path).expanduser()
    if path.suffix == ".json" and path.is_dir():
        raise ValueError(f"--output_path {output_path}: is a folder; give a folder path or a .json file path")
    if path.suffix != ".json" and path.exists() and not path.is_dir():
        raise ValueError(f"--output_path {output_path}: is a file; give a folder (or a path ending in .json)")
    existing = path if path.suffix != ".json" else path.parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"--output_path {output_path}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"--output_path {output_path}: {existing} is not writable; choose another path")


def pick_device(name: str) -> str:
    """--device auto: the GPU when there is one, else the CPU."""
    import torch

    if name != "auto":
        return name
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_model_and_tokenizer(args: argparse.Namespace):
    """MODEL (a causal LM or an encoder-decoder; an adapter folder: its base with the adapter on) and its tokenizer
    (or --tokenizer) through the shared loader, in eval mode on --device."""
    from ..data.pretrained_sources import load_model, load_tokenizer

    flag = "--tokenizer" if args.tokenizer else "MODEL (no --tokenizer given)"
    tokenizer = load_tokenizer(args.tokenizer or args.model, flag, trust_remote_code=args.trust_remote_code)
    if args.apply_chat_template and not tokenizer.chat_template:
        raise ValueError(f"--apply_chat_template: the tokenizer of {args.tokenizer or args.model} has no chat "
                         "template; leave the flag out, or give --tokenizer a folder whose tokenizer "
                         "has one")  # fmt: skip
    model = load_model(args.model, "MODEL", dtype=args.dtype, trust_remote_code=args.trust_remote_code)
    return model.to(pick_device(args.device)).eval(), tokenizer


def run_header(args: argparse.Namespace) -> str:
    """The line above the table, as lm-eval's CLI prints it."""
    limit = "None" if args.limit is None else f"{args.limit:g}"
    return (f"{args.model}: limit {limit}, num_fewshot {args.num_fewshot}, batch_size {args.batch_size}, "
            f"gen_kwargs {args.gen_kwargs}")  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    """Run `llmsys eval`: prints lm-eval's table (and where the results went); returns lm-eval's results dict."""
    args = parse_args(argv)
    from ..data.pretrained_sources import load_config
    from ..evaluation.lm_eval_tasks import (
        evaluate_tasks,
        evaluation_tracker,
        require_lm_eval,
        results_table,
        save_results,
        select_tasks,
    )

    check_flags(args)
    require_lm_eval("llmsys eval")
    load_config(args.model, "MODEL", trust_remote_code=args.trust_remote_code)  # MODEL checked before the tasks
    selection = select_tasks(args.tasks, "--tasks", args.include_path)
    model, tokenizer = load_model_and_tokenizer(args)
    tracker = evaluation_tracker(args.output_path) if args.output_path else None
    results = evaluate_tasks(
        model, tokenizer, selection, num_fewshot=args.num_fewshot, limit=args.limit, batch_size=args.batch_size,
        max_length=args.max_length, log_samples=args.log_samples, apply_chat_template=args.apply_chat_template,
        gen_kwargs=args.gen_kwargs, evaluation_tracker=tracker, model_source=args.model,
    )  # fmt: skip
    written = save_results(tracker, results, args.log_samples) if args.output_path else []
    print(run_header(args))
    print(results_table(results))
    for path in written:
        print(f"wrote {path}")
    return results
