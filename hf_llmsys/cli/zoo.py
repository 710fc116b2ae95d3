"""The positional-encoding zoo's command line (``python scripts/pe_zoo.py``; not an `llmsys` command): options ->
`ZooSettings`, then `run_zoo` (``hf_llmsys/experiments/positional_zoo.py``) with its log records on stderr."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from ..experiments import positional_zoo
from ..experiments.positional_zoo import DEFAULT_FACTORS, PRESETS, ROPE_SCALINGS, ZooSettings, run_zoo
from ..models.positional_encodings import POSITIONAL_ENCODINGS
from .log_output import command_logging


def parse_args(argv: list[str] | None) -> ZooSettings:
    """Command-line options -> ZooSettings."""
    parser = argparse.ArgumentParser(prog="pe_zoo", description=positional_zoo.__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/pe_zoo"))
    parser.add_argument("--encodings", nargs="+", default=sorted(POSITIONAL_ENCODINGS))
    parser.add_argument("--rope-scalings", nargs="*", default=sorted(ROPE_SCALINGS))
    parser.add_argument("--train-length", type=int, default=64)
    parser.add_argument("--eval-factors", type=float, nargs="+", default=list(DEFAULT_FACTORS))
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-files", nargs="+", default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default=None,
        help="a budget from PRESETS: 'demo' (what `llmsys demo` trains, <= 3 min), 'smoke' (seconds)",
    )
    parser.add_argument("--quick", action="store_true", help="same as --preset smoke (tiny budget for tests)")
    args = parser.parse_args(argv)
    settings = ZooSettings(
        out=args.out, encodings=args.encodings, train_length=args.train_length,
        eval_factors=tuple(args.eval_factors), steps=args.steps, batch_size=args.batch_size, seed=args.seed,
        train_files=args.train_files, rope_scalings=args.rope_scalings, threads=args.threads,
    )  # fmt: skip
    preset = "smoke" if args.quick else args.preset
    return replace(settings, **PRESETS[preset]) if preset else settings


def main(argv: list[str] | None = None) -> dict:
    """Entry point of scripts/pe_zoo.py (each run's line is a log record, shown on stderr)."""
    settings = parse_args(argv)
    with command_logging():
        return run_zoo(settings)
