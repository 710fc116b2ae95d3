"""`llmsys ifd`: score Alpaca records by Instruction-Following Difficulty and keep the top fraction.

    llmsys ifd --model DIR --data alpaca.json --out selected.json [--keep 0.1] [--max_length N]
               [--batch_size B] [--scores_out scores.jsonl] [--limit N] [--max_dropped F]

Writes the selected records (input fields plus ``ifd``, highest first) as JSON, and optionally every record's
scores as JSON lines; prints how many records were scored, dropped because their prompt does not fit in
--max_length, dropped with IFD > 1, and kept. A record whose prompt does not fit is never scored (its IFD would be
1.0 by construction); when more than --max_dropped (default 0.1) of the records do not fit, or none does, the run
is refused before scoring.
"""

from __future__ import annotations

import argparse
import json
import math
import os

from .parsing import CommandParser

# ifd and model_limits import torch: imported by the functions, so `llmsys ifd --help` stays instant


def build_parser() -> CommandParser:
    """The flags of `llmsys ifd`."""
    parser = CommandParser(prog="llmsys ifd", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="folder (or id) of a causal LM with its tokenizer")
    parser.add_argument("--data", required=True, help="Alpaca JSON file: a list of {instruction, input, output}")
    parser.add_argument("--out", required=True, help="where to write the selected records (JSON)")
    parser.add_argument("--keep", type=float, default=0.1, help="fraction of the records to keep (0, 1]")
    parser.add_argument("--max_length", type=int, default=None, help="tokens per sequence (default: model context)")
    parser.add_argument("--batch_size", type=int, default=8, help="sequences per forward pass")
    parser.add_argument("--scores_out", default=None, help="optional JSON-lines file with every record's scores")
    parser.add_argument("--limit", type=int, default=None, help="score only the first N records")
    parser.add_argument(
        "--max_dropped", type=float, default=0.1,
        help="refuse the run when more than this fraction of the records' prompts do not fit in --max_length "
        "(1 scores whatever fits)",
    )  # fmt: skip
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Parse `llmsys ifd` arguments."""
    return build_parser().parse_args(argv)


def load_model(name: str):
    """Model and tokenizer from a folder or id with the Auto classes (importing hf_llmsys registered ours)."""
    from ..data.pretrained_sources import load_causal_lm, load_tokenizer

    return load_causal_lm(name, "--model"), load_tokenizer(name, "--model")


def scores_jsonl(scores: list[dict]) -> str:
    """One JSON object per record: its index and its scores."""
    return "".join(json.dumps({"index": i, **s}) + "\n" for i, s in enumerate(scores))


def check_flags(args: argparse.Namespace) -> None:
    """--keep in (0, 1], --max_length >= 2, --batch_size >= 1, --limit >= 1, --max_dropped in [0, 1], the output
    folders exist: before anything is loaded or scored."""
    if not 0 < args.keep <= 1:
        raise ValueError(f"--keep must be in (0, 1], got {args.keep}")
    if args.max_length is not None and args.max_length < 2:
        raise ValueError(f"--max_length must be >= 2 (a start token and an answer token), got {args.max_length}")
    if args.batch_size < 1:
        raise ValueError(f"--batch_size must be >= 1, got {args.batch_size}")
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be >= 1, got {args.limit}")
    if not 0 <= args.max_dropped <= 1:
        raise ValueError(f"--max_dropped must be in [0, 1], got {args.max_dropped}")
    for flag, path in (("--out", args.out), ("--scores_out", args.scores_out)):
        folder = os.path.dirname(os.path.abspath(path)) if path else None
        if folder and not os.path.isdir(folder):
            raise ValueError(f"{flag} {path}: the folder {folder} does not exist; create it or choose another {flag}")


def check_prompts_fit(model, tokenizer, records: list[dict], max_length: int | None, max_dropped: float) -> int:
    """How many records' prompts do not fit in `max_length`; refuse when none fits or more than `max_dropped`
    (a fraction) do not: their IFD cannot be computed, and 1.0 would be a made-up score."""
    from ..evaluation.ifd import encode_pairs
    from ..evaluation.model_limits import resolve_max_length

    max_length = resolve_max_length(model, tokenizer, max_length)
    n_dropped = sum(pair is None for pair in encode_pairs(tokenizer, records, max_length))
    if n_dropped == len(records) or n_dropped > max_dropped * len(records):
        raise ValueError(
            f"--max_length {max_length}: the prompt of {n_dropped} of {len(records)} records does not fit with an "
            f"answer token (more than --max_dropped {max_dropped:g}); raise --max_length, or --max_dropped to "
            "score only the records that fit."
        )
    return n_dropped


def main(argv: list[str]) -> None:
    """Score, select, write, summarise; user errors raise ValueError (the CLI prints them)."""
    args = parse_args(argv)
    check_flags(args)
    from ..evaluation.alpaca import load_alpaca
    from ..evaluation.ifd import ifd_scores, select_by_ifd, write_json_atomic, write_selected

    records = load_alpaca(args.data, limit=args.limit)
    if not records:
        raise ValueError(f"--data {args.data}: the record list is empty; give a JSON list of Alpaca records")
    model, tokenizer = load_model(args.model)
    n_dropped = check_prompts_fit(model, tokenizer, records, args.max_length, args.max_dropped)
    scores = ifd_scores(model, tokenizer, records, max_length=args.max_length, batch_size=args.batch_size)
    selected = select_by_ifd(records, scores, keep=args.keep)
    write_selected(args.out, selected, source=args.data)
    if args.scores_out:
        write_json_atomic(args.scores_out, scores_jsonl(scores), source=args.data)
    scored = [s for s in scores if s["ifd"] is not None]
    dropped = sum(1 for s in scored if s["ifd"] > 1)
    print(f"records scored: {len(scored)} of {len(scores)}")
    print(f"dropped (prompt does not fit in --max_length): {n_dropped}")
    print(f"dropped (IFD > 1): {dropped}")
    undefined = sum(1 for s in scored if math.isnan(s["ifd"]))
    if undefined:
        print(f"skipped (IFD undefined, zero answer loss): {undefined}")
    print(f"kept: {len(selected)} (keep={args.keep}) -> {args.out}")
