"""`llmsys ifd`: score Alpaca records by Instruction-Following Difficulty and keep the top fraction.

    llmsys ifd --model DIR --data alpaca.json --out selected.json [--keep 0.1] [--max-length N]
               [--batch-size B] [--scores-out scores.jsonl] [--limit N]

Writes the selected records (input fields plus ``ifd``, highest first) as JSON, and optionally every record's
scores as JSON lines; prints how many records were scored, dropped with IFD > 1, and kept.
"""

from __future__ import annotations

import argparse
import json
import math

from .alpaca import load_alpaca
from .ifd import encode_pair, ifd_scores, select_by_ifd, start_token_id, write_json_atomic, write_selected
from .model_limits import resolve_max_length


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command-line options."""
    parser = argparse.ArgumentParser(prog="llmsys ifd", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="folder (or id) of a causal LM with its tokenizer")
    parser.add_argument("--data", required=True, help="Alpaca JSON file: a list of {instruction, input, output}")
    parser.add_argument("--out", required=True, help="where to write the selected records (JSON)")
    parser.add_argument("--keep", type=float, default=0.1, help="fraction of the records to keep (0, 1]")
    parser.add_argument("--max-length", type=int, default=None, help="tokens per sequence (default: model context)")
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per forward pass")
    parser.add_argument("--scores-out", default=None, help="optional JSON-lines file with every record's scores")
    parser.add_argument("--limit", type=int, default=None, help="score only the first N records")
    return parser.parse_args(argv)


def load_model(name: str):
    """Model and tokenizer from a folder or id with the Auto classes (importing hf_llmsys registered ours)."""
    from ..data.pretrained_sources import load_causal_lm, load_tokenizer

    return load_causal_lm(name, "--model"), load_tokenizer(name, "--model")


def scores_jsonl(scores: list[dict]) -> str:
    """One JSON object per record: its index and its scores."""
    return "".join(json.dumps({"index": i, **s}) + "\n" for i, s in enumerate(scores))


def check_flags(args: argparse.Namespace) -> None:
    """--keep in (0, 1], --max-length >= 2, --batch-size >= 1, --limit >= 1, before anything is loaded."""
    if not 0 < args.keep <= 1:
        raise ValueError(f"--keep must be in (0, 1], got {args.keep}")
    if args.max_length is not None and args.max_length < 2:
        raise ValueError(f"--max-length must be >= 2 (a start token and an answer token), got {args.max_length}")
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be >= 1, got {args.limit}")


def check_prompts_fit(model, tokenizer, records: list[dict], max_length: int | None) -> None:
    """Refuse a --max-length that leaves no prompt token in any record: every IFD would be exactly 1.0."""
    max_length = resolve_max_length(model, tokenizer, max_length)
    start_id = start_token_id(tokenizer)
    pairs = (encode_pair(tokenizer, record, start_id, max_length) for record in records)
    if all(len(conditioned) == len(alone) for conditioned, alone in pairs):
        raise ValueError(
            f"--max-length {max_length} leaves no room for the prompt of any record (the answers fill it), so "
            "every IFD would be 1.0; raise --max-length."
        )


def main(argv: list[str]) -> None:
    """Score, select, write, summarise; user errors raise ValueError (the CLI prints them)."""
    args = parse_args(argv)
    check_flags(args)
    records = load_alpaca(args.data, limit=args.limit)
    model, tokenizer = load_model(args.model)
    check_prompts_fit(model, tokenizer, records, args.max_length)
    scores = ifd_scores(model, tokenizer, records, max_length=args.max_length, batch_size=args.batch_size)
    selected = select_by_ifd(records, scores, keep=args.keep)
    write_selected(args.out, selected, source=args.data)
    if args.scores_out:
        write_json_atomic(args.scores_out, scores_jsonl(scores), source=args.data)
    dropped = sum(1 for s in scores if s["ifd"] > 1)
    print(f"records scored: {len(scores)}")
    print(f"dropped (IFD > 1): {dropped}")
    undefined = sum(1 for s in scores if math.isnan(s["ifd"]))
    if undefined:
        print(f"skipped (IFD undefined, zero answer loss): {undefined}")
    print(f"kept: {len(selected)} (keep={args.keep}) -> {args.out}")
