"""`llmsys sft`: the command line of the instruction-tuning job `hf_llmsys.training.sft.run_sft` (flags parsed into
its dataclasses, ``training/sft_arguments.py``; the summary printed by the main process)."""

from __future__ import annotations

from ..training.job import is_world_process_zero
from ..training.sft import ARGUMENT_CLASSES, run_sft
from .jobs import JobCommand, print_compile_report

PROG = "llmsys sft"
DESCRIPTION = (
    "Instruction-tune a causal LM or an encoder-decoder on Alpaca records or conversations with the Trainer: loss on "
    "the responses, optional LoRA and packing."
)

COMMAND = JobCommand(ARGUMENT_CLASSES, PROG, DESCRIPTION)
parse_args, build_parser, help_text = COMMAND.parse_args, COMMAND.build_parser, COMMAND.help_text


def print_sft_results(results: dict, output_dir: str) -> None:
    """Print the final summary."""
    print(
        f"held-out response loss {results['response_loss_before']:.4f} -> {results['response_loss_after']:.4f} | "
        f"perplexity {results['response_perplexity_before']:.2f} -> {results['response_perplexity_after']:.2f}"
    )
    print(
        f"records {results['records_read']} (invalid {results['invalid_records'] or 0}); train examples "
        f"{results['train_examples']} (dropped {results['dropped_examples'] or 0}, prompt cut "
        f"{results['prompt_truncated']}, response cut {results['response_truncated']}); held out "
        f"{results['validation_examples']}"
    )
    print(f"max_length {results['max_length']}: {results['max_length_rule']}")
    for g in results["generations"]:
        prompt = repr(g["prompt"]) if "prompt" in g else f"{g['instruction']!r} {g['input']!r}"
        print(f"  prompt: {prompt}\n    expected: {g['output']!r}\n    model:    {g['generated']!r}")
    print(
        f"steps {results['global_step']}; tokens {results['tokens_seen']:,}; runtime {results['runtime_s']} s; "
        f"saved to {output_dir}"
    )
    print_compile_report(results)


def main(argv: list[str] | None = None) -> dict:
    """Entry point of `llmsys sft`: run the job, print its summary (main process); returns the summary."""
    model_args, data_args, training_args = parse_args(argv)
    results = run_sft(model_args, data_args, training_args)
    if is_world_process_zero(training_args):
        print_sft_results(results, training_args.output_dir)
    return results
