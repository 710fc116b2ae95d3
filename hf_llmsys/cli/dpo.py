"""`llmsys dpo`: the command line of the preference-tuning job `hf_llmsys.training.dpo.run_dpo` (flags parsed into
its dataclasses, ``training/dpo_arguments.py``; the summary printed by the main process). Needs the ``dpo`` extra
(TRL) to run; its short help is stored (`stored_help.py`)."""

from __future__ import annotations

from ..training.dpo import ARGUMENT_CLASSES, run_dpo
from ..training.job import is_world_process_zero
from .jobs import JobCommand

PROG = "llmsys dpo"
DESCRIPTION = (
    "Preference-tune a causal LM on prompt / chosen / rejected records with TRL's DPOTrainer: full or LoRA, from a "
    "base, an SFT folder or an SFT adapter folder, prompts rendered as llmsys sft renders them."
)

COMMAND = JobCommand(ARGUMENT_CLASSES, PROG, DESCRIPTION)
parse_args, build_parser, help_text = COMMAND.parse_args, COMMAND.build_parser, COMMAND.help_text


def print_dpo_results(results: dict, output_dir: str) -> None:
    """Print the final summary."""
    before, after = results["held_out_before"], results["held_out_after"]
    print(results["method"])
    print(
        f"held-out preference accuracy {before['preference_accuracy']:.3f} -> {after['preference_accuracy']:.3f} | "
        f"reward margin {after['reward_margin']:.4f}, reward accuracy {after['reward_accuracy']:.3f}, "
        f"DPO loss {after['dpo_loss']:.4f}"
    )
    print(
        f"records {results['records_read']} (invalid {results['invalid_records'] or 0}); train pairs "
        f"{results['train_pairs']} (dropped {results['dropped_pairs'] or 0}, prompt cut {results['prompt_truncated']}, "
        f"answer cut {results['response_truncated']}); held out {results['validation_pairs']}; template "
        f"{results['template']} ({results['template_from']}); max_length {results['max_length']}"
    )
    for g in results["generations"]:
        print(f"  prompt: {g['prompt']!r}\n    chosen: {g['chosen']!r}\n    before: {g['before']!r}\n"
              f"    after:  {g['after']!r}")  # fmt: skip
    print(f"steps {results['global_step']}; runtime {results['runtime_s']} s; saved to {output_dir}")


def main(argv: list[str] | None = None) -> dict:
    """Entry point of `llmsys dpo`: run the job, print its summary (main process); returns the summary."""
    model_args, data_args, training_args = parse_args(argv)
    results = run_dpo(model_args, data_args, training_args)
    if is_world_process_zero(training_args):
        print_dpo_results(results, training_args.output_dir)
    return results
