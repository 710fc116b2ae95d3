"""`llmsys train`: pre-train a tiny model with `transformers.Trainer` on plain text.

The command line of the job `hf_llmsys.training.train.run_training`: flags parsed into its dataclasses
(``training/pretrain_arguments.py``), the flags given noted (what a model type that does not take them refuses),
the summary printed by the main process.
"""

from __future__ import annotations

import sys

from ..training.job import is_world_process_zero
from ..training.model_type_flags import flags_given
from ..training.train import ARGUMENT_CLASSES, run_training
from .jobs import JobCommand, print_compile_report
from .parsing import apply_config_file, take_config_file

PROG = "llmsys train"
DESCRIPTION = __doc__.split("\n\n")[0]

COMMAND = JobCommand(ARGUMENT_CLASSES, PROG, DESCRIPTION)
parse_args, build_parser, help_text = COMMAND.parse_args, COMMAND.build_parser, COMMAND.help_text


def given_flags(argv: list[str] | None) -> frozenset[str]:
    """The flags `argv` sets explicitly, on the command line or in its ``--config`` file (what a model type that
    does not take them refuses)."""
    parser = build_parser()
    argv, config_file = take_config_file(argv)
    from_file = apply_config_file(parser, config_file) if config_file is not None else set()
    return flags_given(parser, argv) | from_file


def print_results(results: dict, output_dir: str) -> None:
    """Print the final metrics of a pre-training job (validation loss against the unigram baseline)."""
    print(
        f"validation loss {results['val_loss']:.4f} | perplexity {results['val_perplexity']:.2f} | "
        f"unigram baseline perplexity {results['unigram_perplexity']:.2f} | "
        f"baseline/model ratio {results['perplexity_ratio']:.2f}x"
    )
    print(f"tokens seen {results['tokens_seen']:,}; runtime {results['runtime_s']} s; saved to {output_dir}")
    print_compile_report(results)


def main(argv: list[str] | None = None) -> dict:
    """Entry point of `llmsys train`: run the job, print its summary (main process); returns the results dict."""
    argv = list(sys.argv[1:] if argv is None else argv)
    model_args, data_args, training_args = parse_args(argv)
    results = run_training(model_args, data_args, training_args, given_flags(argv))
    if is_world_process_zero(training_args):
        print_results(results, training_args.output_dir)
    return results
