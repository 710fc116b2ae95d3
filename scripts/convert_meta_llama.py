#!/usr/bin/env python
"""CLI over ``hf_llmsys.checkpoints.meta_conversion``: a Meta-layout LLaMA checkpoint (``params.json`` +
``consolidated.*.pth``) -> an hf-llmsys folder. See that module for the layouts and options.

Usage::

    python scripts/convert_meta_llama.py --input-dir llama-2-7b --output_dir llama-2-7b-llmsys
    python scripts/convert_meta_llama.py --input-dir Llama3.1-8B --output_dir out --rope-layout half \\
        --bos-id 128000 --eos-id 128001 --dtype bfloat16
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from hf_llmsys.checkpoints.meta_conversion import DTYPES, ROPE_LAYOUTS, ConversionError, convert_meta_checkpoint
from hf_llmsys.cli.parsing import CommandParser

__all__ = ["ConversionError", "build_parser", "convert_meta_checkpoint", "main"]


def build_parser() -> CommandParser:
    parser = CommandParser(
        prog="python scripts/convert_meta_llama.py",
        description="Convert a Meta LLaMA checkpoint (params.json + consolidated.*.pth) into an hf-llmsys folder.",
    )
    parser.add_argument("--input_dir", required=True, help="folder with params.json and consolidated.*.pth")
    parser.add_argument("--output_dir", required=True, help="folder to write the hf-llmsys model into")
    parser.add_argument(
        "--rope_layout", choices=ROPE_LAYOUTS, default="interleaved",
        help="interleaved: keep Meta's q/k rows, rope_interleaved=True (default); half: permute q/k rows into "
             "transformers' rotate_half layout, rope_interleaved=False",
    )  # fmt: skip
    parser.add_argument("--vocab_size", type=int, default=None, help="override params.json's vocab_size")
    parser.add_argument(
        "--max_position_embeddings", type=int, default=None,
        help="default: params.json max_seq_len, else 131072 with use_scaled_rope, else 2048",
    )  # fmt: skip
    parser.add_argument("--bos_id", type=int, default=1, help="beginning-of-sequence token id (default 1)")
    parser.add_argument("--eos_id", type=int, default=2, help="end-of-sequence token id (default 2)")
    parser.add_argument("--dtype", choices=list(DTYPES), default="auto", help="default: keep the checkpoint's dtype")
    parser.add_argument("--overwrite", action="store_true", help="replace a model already in --output_dir")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        convert_meta_checkpoint(
            args.input_dir,
            args.output_dir,
            rope_layout=args.rope_layout,
            vocab_size=args.vocab_size,
            max_position_embeddings=args.max_position_embeddings,
            bos_id=args.bos_id,
            eos_id=args.eos_id,
            dtype=args.dtype,
            overwrite=args.overwrite,
        )
    except ConversionError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
