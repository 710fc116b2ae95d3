"""`llmsys clean`: clean pretraining documents with a recipe; write them and a report atomically.

    llmsys clean --input crawl/*.jsonl --output clean/ --recipe fineweb-like --num-proc 2
    llmsys clean --input books/*.txt --output clean/ --recipe gopher          # one document per file
    llmsys clean --input lines.txt --lines --output clean/ --recipe my_recipe.yaml --format parquet
    llmsys clean --input user/dataset --split train --text-field content --output clean/ --recipe c4
    llmsys clean --engine ray --address auto --input s3://bucket/crawl/ --output /shared/clean --format parquet

The command line of the job `hf_llmsys.cleaning.job.run_clean` (what the output folder receives: its docstring):
flags parsed into `CleanArguments` and checked, then the report table printed.
"""

from __future__ import annotations

from pathlib import Path

from ..cleaning.job import CleanArguments, check_clean_args, run_clean
from .parsing import answer_help, dataclass_parser, parse_into_dataclasses, short_help

ARGUMENT_CLASSES = (CleanArguments,)


def build_parser():
    """transformers' HfArgumentParser over `CleanArguments` (`parsing.dataclass_parser`)."""
    return dataclass_parser(ARGUMENT_CLASSES, "llmsys clean", __doc__.split("\n\n")[0])


def help_text() -> str:
    """`llmsys clean --help` (stored for the console script: `stored_help.py`)."""
    return short_help(build_parser(), ARGUMENT_CLASSES)


def parse_args(argv: list[str] | None) -> CleanArguments:
    """Parse and validate `llmsys clean` arguments."""
    parser = build_parser()
    answer_help(parser, ARGUMENT_CLASSES, argv)
    (args,) = parse_into_dataclasses(parser, argv)
    return check_clean_args(args)


def main(argv: list[str] | None = None) -> dict:
    """Run `llmsys clean`; prints the report table and returns the report dict."""
    args = parse_args(argv)
    summary, report = run_clean(args)
    output = Path(args.output)
    names = [summary["output_file"]] if "output_file" in summary else summary["output_files"]
    where = output / names[0] if len(names) == 1 else f"{len(names)} shards in {output}"
    print(report.table())
    print(f"wrote {report.documents_out:,} documents to {where} and {output / 'report.json'}")
    return summary
