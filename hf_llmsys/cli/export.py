"""`llmsys export SRC OUT --format transformers|gguf [--dtype f32|f16|bf16|q8_0|q6_K|q5_K_M|q4_K_M] [--overwrite]`.

Only the standard library at the top: torch and transformers are imported after the arguments are parsed, so
``--help`` and argument errors answer at once. The work is ``hf_llmsys.export.export`` (its docstring says what each format writes).
"""

from __future__ import annotations

import argparse

from ..export.gguf_types import GGUF_DTYPES
from .parsing import CommandParser

EPILOG = """\
transformers: OUT is a folder that transformers loads with its own class (no trust_remote_code, no hf-llmsys):
  RMSNorm + gated MLP + RoPE -> llama (all layers dense), mistral (all local), ministral (mixed);
  LayerNorm + MLP + learned positions -> gpt2 (dense), gpt_neo (with local layers); llmsys_t5 -> t5.
  A feature no class expresses (ALiBi, T5 / Shaw relative biases on a decoder, sinusoidal, NoPE, strided / fixed
  layouts, ...) is refused with one line naming it; nothing is written.
gguf: OUT is one .gguf file for llama.cpp: RMSNorm + SwiGLU + RoPE decoders as its llama architecture, dense
  LayerNorm + GELU + learned-position decoders (llmsys_gpt3) as its gpt2. q6_K, q5_K_M and q4_K_M are made by
  llama.cpp's own quantiser and need llama-cpp-python (pip install llama-cpp-python).
SRC may be a PEFT adapter folder (what llmsys sft --lora_r N saves): the adapter is merged into its base first.
"""


def build_parser() -> CommandParser:
    """The flags of `llmsys export`."""
    parser = CommandParser(
        prog="llmsys export",
        description="Export an hf-llmsys model (or a LoRA adapter over one, merged) to transformers' own classes "
        "or to GGUF.",
        epilog=EPILOG,
    )
    parser.add_argument("src", metavar="SRC", help="a saved hf-llmsys model folder, or a PEFT adapter folder")
    parser.add_argument("out", metavar="OUT", help="the folder (transformers) or .gguf file (gguf) to write")
    parser.add_argument("--format", required=True, choices=["transformers", "gguf"], help="what to write")
    parser.add_argument("--dtype", choices=GGUF_DTYPES, help="GGUF tensor type (gguf only; default f32)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing non-empty OUT")
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse `llmsys export` arguments."""
    return build_parser().parse_args(argv)


def main(argv: list[str] | None = None) -> str:
    """Run the export; prints and returns the path written."""
    args = parse_args(argv)
    from transformers.utils import logging

    from ..export import export

    logging.disable_progress_bar()  # per-file load / save bars of a few tiny files; the one line below says it all
    try:
        out = export(args.src, args.out, format=args.format, dtype=args.dtype, overwrite=args.overwrite)
    finally:
        logging.enable_progress_bar()
    print(f"exported {args.src} ({args.format}) to {out}")
    return str(out)
