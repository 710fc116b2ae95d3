"""The job of `llmsys clean` (`run_clean`; its command line: ``cli/clean.py``): clean pretraining documents with a
recipe; write them and a report atomically.

The output folder receives ``data.jsonl`` (or ``data.parquet``: the input's fields, cleaned text) and
``report.json`` (documents and characters in and out, drops per rule with examples, the steps run). Everything
is written to a hidden staging folder next to it and renamed into place at the end: on any error the output
folder is left exactly as it was. With ``--engine ray`` Ray Data reads the inputs (JSON Lines, parquet or text;
local paths or fsspec URLs), the steps run on the Ray cluster, and the output folder receives shards
``part-<first input position>.jsonl|parquet`` (written by the workers: on a cluster it must be a path every node
sees) and the same ``report.json``.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .files import OUTPUT_FORMATS, check_output_dir, publish, read_input, staging_dir, write_documents
from .pipeline import clean
from .recipes import RECIPES, load_recipe
from .report import CleaningReport

ENGINES = ("datasets", "ray")
MIN_OBJECT_STORE_MB = 75  # Ray's ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES


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
    engine: str = field(default="datasets", metadata={"help": f"Engine: {' or '.join(ENGINES)}."})
    address: str | None = field(
        default=None,
        metadata={
            "help": "Ray cluster for --engine ray: auto, host:port or ray://host:port (default: start one here)."
        },
    )
    ray_runtime_env: str | None = field(
        default=None,
        metadata={
            "help": 'Ray runtime environment of the job\'s workers as JSON, e.g. \'{"pip": ["hf-llmsys"]}\' '
            "(--engine ray)."
        },
    )
    ray_object_store_mb: int | None = field(
        default=None,
        metadata={
            "help": "Object store of the Ray cluster started here, in MB (default: Ray's, 30%% of memory). Blocks "
            "beyond it spill to disk, so it bounds the engine's shared memory (--engine ray without --address)."
        },
    )


def check_clean_args(args: CleanArguments) -> CleanArguments:
    """Validate `llmsys clean` arguments (ValueError naming the flag), ``--ray-runtime-env`` parsed into a dict."""
    if args.format not in OUTPUT_FORMATS:
        raise ValueError(f"--format must be one of {list(OUTPUT_FORMATS)}, got {args.format!r}.")
    for name in ("num_proc", "batch_size"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}.")
    if args.max_examples < 0:
        raise ValueError(f"--max-examples must be >= 0, got {args.max_examples}.")
    if args.engine not in ENGINES:
        raise ValueError(f"--engine must be one of {list(ENGINES)}, got {args.engine!r}.")
    if args.engine == "ray" and args.streaming:
        raise ValueError("--streaming is for --engine datasets; Ray Data always streams.")
    for name in ("address", "ray_runtime_env", "ray_object_store_mb"):
        if getattr(args, name) is not None and args.engine != "ray":
            raise ValueError(f"--{name.replace('_', '-')} needs --engine ray.")
    if args.ray_object_store_mb is not None:
        if args.address is not None:
            raise ValueError(
                "--ray-object-store-mb sizes a cluster started here; a running cluster's object store is set when it "
                "starts (`ray start --object-store-memory BYTES`): drop one of --ray-object-store-mb and --address."
            )
        if args.ray_object_store_mb < MIN_OBJECT_STORE_MB:
            raise ValueError(f"--ray-object-store-mb must be >= {MIN_OBJECT_STORE_MB} (Ray's minimum), got "
                             f"{args.ray_object_store_mb}.")  # fmt: skip
    args.ray_runtime_env = parse_runtime_env(args.ray_runtime_env)
    return args


def parse_runtime_env(text: str | None) -> dict | None:
    """--ray-runtime-env: a JSON object (Ray's runtime_env), or None."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"--ray-runtime-env is not valid JSON ({err.msg} at character {err.pos}): {text!r}.") from err
    if not isinstance(value, dict):
        raise ValueError(f'--ray-runtime-env must be a JSON object such as \'{{"pip": ["hf-llmsys"]}}\', got {text!r}.')
    return value


def run_clean(args: CleanArguments) -> tuple[dict, CleaningReport]:
    """Clean the inputs of `args` (checked by `check_clean_args`) into its output folder; returns (the summary
    written to report.json, the report)."""
    output = Path(args.output)
    check_output_dir(output, args.overwrite)
    _, steps = load_recipe(args.recipe)  # a bad recipe fails before any input is read
    if args.engine == "ray":
        return _run_ray(args, output, steps)
    dataset = read_input(args.input, args.text_field, args.lines, args.split, args.streaming)
    result = clean(
        dataset, args.recipe, text_field=args.text_field, num_proc=args.num_proc, batch_size=args.batch_size,
        max_examples=args.max_examples,
    )  # fmt: skip
    return _publish(
        args, output, result.report, lambda staging: [write_documents(result.dataset, staging, args.format).name]
    )


def _run_ray(args: CleanArguments, output: Path, steps) -> tuple[dict, CleaningReport]:
    """`llmsys clean --engine ray`: connect, check the workers, read with Ray Data, clean, write shards."""
    from .engine_ray import INDEX, check_recipe_runs_on_ray, clean_ray
    from .ray_cluster import check_workers_import, configure_data_context, connect
    from .ray_io import (
        explain_read_error,
        is_read_error,
        local_read_error,
        read_ray_input,
        resolve_inputs,
        write_ray_output,
    )

    check_recipe_runs_on_ray(steps)
    resolve_inputs(args.input)  # missing inputs fail before a cluster is touched
    object_store = None if args.ray_object_store_mb is None else args.ray_object_store_mb * 2**20
    connect(args.address, runtime_env=args.ray_runtime_env, object_store_memory=object_store)
    check_workers_import(runtime_env=args.ray_runtime_env)
    configure_data_context()  # before the read: a dataset keeps the settings it was created with
    dataset = read_ray_input(args.input, args.text_field, args.lines)  # lazy: read as the steps go
    try:
        schema = dataset.schema()
    except Exception as err:  # ray.exceptions.RayTaskError wrapping pyarrow's parse errors
        raise explain_read_error(err, args.input, args.text_field, args.lines) from err
    try:
        result = clean_ray(
            dataset, args.recipe, text_field=args.text_field, num_proc=args.num_proc, batch_size=args.batch_size,
            max_examples=args.max_examples,
        )  # fmt: skip
    except Exception as err:  # a file past the first can fail to parse only now, while the steps stream
        if not is_read_error(err):  # a step's own error: re-reading the corpus would only delay it
            raise
        precise = local_read_error(args.input, args.text_field, args.lines)
        if precise is None:
            raise
        raise precise from err
    return _publish(
        args, output, result.report,
        lambda staging: write_ray_output(result.indexed, staging, args.format, INDEX, input_schema=schema),
    )  # fmt: skip


def _publish(args: CleanArguments, output: Path, report, write) -> tuple[dict, CleaningReport]:
    """Documents (`write(staging)` -> file names) and report.json into a staging folder, renamed into place."""
    staging = staging_dir(output)
    try:
        names = write(staging)
        report.check_totals()
        files = {"output_file": names[0]} if args.engine == "datasets" else {"output_files": names}
        summary = report.to_dict() | {"input": args.input, **files, "text_field": args.text_field}
        (staging / "report.json").write_text(json.dumps(summary, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        publish(staging, output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return summary, report
