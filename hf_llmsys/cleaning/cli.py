"""`llmsys clean`: clean pretraining documents with a recipe; write them and a report atomically.

    llmsys clean --input crawl/*.jsonl --output clean/ --recipe fineweb-like --num-proc 2
    llmsys clean --input books/*.txt --output clean/ --recipe gopher          # one document per file
    llmsys clean --input lines.txt --lines --output clean/ --recipe my_recipe.yaml --format parquet
    llmsys clean --input user/dataset --split train --text-field content --output clean/ --recipe c4

The output folder receives ``data.jsonl`` (or ``data.parquet``: the input's fields, cleaned text) and
``report.json`` (documents and characters in and out, drops per rule with examples, the steps run). Everything
is written to a hidden staging folder next to it and renamed into place at the end: on any error the output
folder is left exactly as it was.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser

from .files import OUTPUT_FORMATS, check_output_dir, publish, read_input, staging_dir, write_documents
from .pipeline import clean
from .recipes import RECIPES, load_recipe


@dataclass
class CleanArguments:
    """Arguments of `llmsys clean`."""

    input: list[str] = field(
        metadata={"help": "JSONL / JSON / parquet / .txt files, a save_to_disk folder, or a datasets id."}
    )
    output: str = field(metadata={"help": "Output folder (created; must be empty unless --overwrite)."})
    recipe: str = field(
        default="fineweb-like", metadata={"help": f"Built-in recipe ({', '.join(RECIPES)}) or a .yaml/.json file."}
    )
    text_field: str = field(default="text", metadata={"help": "Field holding the document text."})
    lines: bool = field(default=False, metadata={"help": "Plain .txt input: one document per non-empty line."})
    split: str = field(default="train", metadata={"help": "Split of a datasets id or saved DatasetDict."})
    format: str = field(default="jsonl", metadata={"help": "Output format: jsonl or parquet."})
    num_proc: int = field(default=1, metadata={"help": "Worker processes for map / filter."})
    batch_size: int = field(default=256, metadata={"help": "Documents per map batch."})
    max_examples: int = field(default=3, metadata={"help": "Examples kept per drop rule in report.json."})
    streaming: bool = field(default=False, metadata={"help": "Process as an IterableDataset (no quantile steps)."})
    overwrite: bool = field(default=False, metadata={"help": "Replace a non-empty output folder (at the end)."})


def parse_args(argv: list[str] | None) -> CleanArguments:
    """Parse and validate `llmsys clean` arguments."""
    parser = HfArgumentParser(CleanArguments, prog="llmsys clean", description=__doc__.split("\n\n")[0])
    (args,) = parser.parse_args_into_dataclasses(args=argv)
    if args.format not in OUTPUT_FORMATS:
        raise ValueError(f"--format must be one of {list(OUTPUT_FORMATS)}, got {args.format!r}.")
    for name in ("num_proc", "batch_size"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}.")
    if args.max_examples < 0:
        raise ValueError(f"--max-examples must be >= 0, got {args.max_examples}.")
    return args


def main(argv: list[str] | None = None) -> dict:
    """Run `llmsys clean`; prints the report table and returns the report dict."""
    args = parse_args(argv)
    output = Path(args.output)
    check_output_dir(output, args.overwrite)
    load_recipe(args.recipe)  # a bad recipe fails before any input is read
    dataset = read_input(args.input, args.text_field, args.lines, args.split, args.streaming)
    result = clean(
        dataset, args.recipe, text_field=args.text_field, num_proc=args.num_proc, batch_size=args.batch_size,
        max_examples=args.max_examples,
    )  # fmt: skip
    staging = staging_dir(output)
    try:
        data_path = write_documents(result.dataset, staging, args.format)
        report = result.report
        report.check_totals()
        summary = report.to_dict() | {"input": args.input, "output_file": data_path.name, "text_field": args.text_field}
        (staging / "report.json").write_text(json.dumps(summary, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        publish(staging, output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    print(report.table())
    print(f"wrote {report.documents_out:,} documents to {output / data_path.name} and {output / 'report.json'}")
    return summary
