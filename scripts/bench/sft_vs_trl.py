#!/usr/bin/env python
"""Benchmark: hf-llmsys' instruction-tuning data layer and training against TRL 1.16's ``SFTTrainer``.

Not a test (TRL is a reference, never imported by hf_llmsys): it compares, measures, prints and optionally writes
JSON. Both sides get the same records, tokenizer, prompt template and ``max_length``.

1. Label masks (``--part masks``): our `SFTExampleEncoder` against the ``input_ids`` / ``labels`` columns that
   ``SFTTrainer`` builds at dataset preparation from a prompt-completion dataset (``completion_only_loss=True``,
   ``truncation_mode="keep_start"``). A text template gives TRL ``prompt`` = the template up to ``{output}``
   (trailing space included, as a user would write it) and ``completion`` = the output (TRL appends the EOS text);
   ``--template chat`` gives TRL conversational prompt / completion messages. Every record whose ids or mask
   differ is classified by what explains it, each explanation checked, not assumed:

   - ``seam_merge``: TRL tokenizes prompt + completion as one text, so BPE can merge the prompt's last characters
     with the response's first (``':"'``, ``'."'``); TRL then supervises that straddling token (its mask starts
     at the common prefix of both tokenizations). Checked: both sides decode to the same text and the first
     differing token is at the seam. We tokenize the two parts separately: no token straddles the seam.
   - ``mask_shift``: same ids, the masks differ only in tokens right at the boundary that decode to whitespace
     (our templates move the prompt's trailing whitespace into the response, e.g. the newline that ends the chat
     template's ``<|im_start|>assistant\\n``).
   - ``truncation``: the full example exceeds ``max_length``. TRL keeps the first ``max_length`` tokens (response
     tail and EOS cut, or the example dropped when no response token is left); we cut the prompt first and keep
     the response and its EOS. Checked: TRL's row is its untruncated row cut at ``max_length``.
   - ``unexplained``: anything else (a defect on one side; the default test requires none).

2. Training throughput (``--part speed``): see `speed_part` (tokens/s of both trainers, without and with packing).

    python scripts/bench/sft_vs_trl.py --part masks                       # 500 Alpaca records, GPT-2 BPE
    python scripts/bench/sft_vs_trl.py --part masks --tokenizer smollm2 --template chat
    python scripts/bench/sft_vs_trl.py --json results.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path

import torch

import hf_llmsys  # noqa: F401  (registers the Auto classes)
from hf_llmsys.data import IGNORE_INDEX, SFTExampleEncoder, load_records, load_template

SHARED_DATA = Path(os.environ.get("LLMSYS_DATA_DIR", Path(__file__).resolve().parents[3] / "shared" / "data"))
DEFAULT_RECORDS = SHARED_DATA / "alpaca_5000.json"
CATEGORIES = ("identical", "seam_merge", "mask_shift", "truncation", "unexplained")


def log(message: str = "") -> None:
    print(message, flush=True)


# ---------------------------------------------------------------- inputs


def load_tokenizer(spec: str, workdir: Path):
    """``gpt2`` (the shared GPT-2 BPE files), ``smollm2`` (the converted checkpoint) or a tokenizer folder."""
    from transformers import AutoTokenizer

    if spec == "gpt2":
        src = SHARED_DATA / "tokenizers" / "gpt2"
        if not (src / "vocab.json").is_file():
            raise ValueError(f"--tokenizer gpt2: {src} has no vocab.json (set LLMSYS_DATA_DIR)")
        folder = workdir / "gpt2-tokenizer"
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("vocab.json", "merges.txt"):
            (folder / name).write_bytes((src / name).read_bytes())
        (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer"}))
        spec = str(folder)
    elif spec == "smollm2":
        from hf_llmsys.checkpoints import find_smollm2

        folder = find_smollm2()
        if folder is None:
            raise ValueError("--tokenizer smollm2: checkpoint not converted; run python scripts/fetch_smollm2.py")
        spec = str(folder)
    tokenizer = AutoTokenizer.from_pretrained(spec)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def trl_rows(records: list[dict], template) -> dict:
    """TRL's prompt-completion columns for `records` under `template` (plus the record index)."""
    if template.name == "chat":
        prompts = [[{"role": "user", "content": template._user_text(r)}] for r in records]
        completions = [[{"role": "assistant", "content": r["output"]}] for r in records]
    else:
        prompts, completions = [], []
        for record in records:
            prompt, response = template.split(record)
            head = len(response) - len(response.lstrip())  # whitespace our split moved: give it back to the prompt
            prompts.append(prompt + response[:head])
            completions.append(response[head:])
    return {"prompt": prompts, "completion": completions, "record_index": list(range(len(records)))}


# ---------------------------------------------------------------- the two label builders


def _tiny_causal_lm(tokenizer):
    """A 1-layer Llama for `tokenizer`'s vocabulary: SFTTrainer needs a model; the masks do not depend on it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    return LlamaForCausalLM(config)


def trl_config(output_dir: str, max_length: int | None, **overrides):
    """SFTConfig with the settings both sides share: fp32, no gradient checkpointing, CPU, nothing reported."""
    from trl import SFTConfig

    settings = dict(
        output_dir=output_dir, max_length=max_length, completion_only_loss=True, report_to="none", use_cpu=True,
        bf16=False, fp16=False, gradient_checkpointing=False, save_strategy="no", logging_strategy="no",
        disable_tqdm=True, seed=0,
    )  # fmt: skip
    settings.update(overrides)
    return SFTConfig(**settings)


def trl_examples(records: list[dict], tokenizer, template, max_length: int | None) -> list[dict | None]:
    """TRL SFTTrainer's prepared (input_ids, labels) per record, None where TRL dropped the record."""
    from datasets import Dataset
    from trl import SFTTrainer

    with tempfile.TemporaryDirectory() as out, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = SFTTrainer(
            model=_tiny_causal_lm(tokenizer),
            args=trl_config(out, max_length),
            train_dataset=Dataset.from_dict(trl_rows(records, template)),
            processing_class=tokenizer,
        )
        prepared = trainer.train_dataset
    rows: list[dict | None] = [None] * len(records)
    for index, ids, labels in zip(prepared["record_index"], prepared["input_ids"], prepared["labels"], strict=True):
        rows[index] = {"input_ids": list(ids), "labels": list(labels)}
    return rows


def our_examples(records: list[dict], tokenizer, template, max_length: int) -> list[dict | None]:
    """Our SFTExampleEncoder's (input_ids, labels) per record, None where we dropped it."""
    examples, _events = SFTExampleEncoder(tokenizer, template, max_length).encode_batch(records)
    return examples


# ---------------------------------------------------------------- comparison


def _first_supervised(labels: list[int]) -> int:
    return next((i for i, t in enumerate(labels) if t != IGNORE_INDEX), len(labels))


def _seam_merge(ours: dict, trl: dict, tokenizer) -> bool:
    """Same text, ids first differing at our prompt/response seam (where TRL's joint tokenization merged)."""
    a, b = ours["input_ids"], trl["input_ids"]
    if a == b or tokenizer.decode(a) != tokenizer.decode(b):
        return False
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    seam = _first_supervised(ours["labels"])
    return seam - 1 <= first <= seam


def _mask_shift(ours: dict, trl: dict, tokenizer) -> bool:
    """Same ids; the masks differ only in whitespace tokens adjacent to the boundary."""
    if ours["input_ids"] != trl["input_ids"]:
        return False
    differ = [i for i, (x, y) in enumerate(zip(ours["labels"], trl["labels"], strict=True)) if x != y]
    lo, hi = sorted((_first_supervised(ours["labels"]), _first_supervised(trl["labels"])))
    inside = all(lo <= i < hi for i in differ) and len(differ) == hi - lo
    return inside and tokenizer.decode(ours["input_ids"][lo:hi]).strip() == ""


def _keep_start(full: dict | None, max_length: int) -> dict | None:
    """TRL's truncation of an untruncated row: the first max_length tokens, dropped when no label is left."""
    if full is None:
        return None
    cut = {k: v[:max_length] for k, v in full.items()}
    return cut if any(t != IGNORE_INDEX for t in cut["labels"]) else None


def classify(ours, trl, ours_full, trl_full, tokenizer, max_length: int) -> set[str]:
    """The explanations that hold for one record (see module doc); {"identical"} when both rows agree."""
    if ours == trl:
        return {"identical"}
    reasons = set()
    if ours_full != trl_full:
        if _seam_merge(ours_full, trl_full, tokenizer):
            reasons.add("seam_merge")
        elif _mask_shift(ours_full, trl_full, tokenizer):
            reasons.add("mask_shift")
        else:
            return {"unexplained"}
    if len(ours_full["input_ids"]) > max_length or len(trl_full["input_ids"]) > max_length:
        if trl != _keep_start(trl_full, max_length):
            return {"unexplained"}
        reasons.add("truncation")
    return reasons or {"unexplained"}


def compare_masks(records: list[dict], tokenizer, template, max_length: int, examples: int = 3) -> dict:
    """Counts of identical and explained rows over `records` (each record counted once per explanation)."""
    ours = our_examples(records, tokenizer, template, max_length)
    ours_full = our_examples(records, tokenizer, template, 1 << 30)
    trl = trl_examples(records, tokenizer, template, max_length)
    trl_full = trl_examples(records, tokenizer, template, None)
    counts, shown = Counter(), {}
    details = Counter()
    for index in range(len(records)):
        reasons = classify(ours[index], trl[index], ours_full[index], trl_full[index], tokenizer, max_length)
        counts.update(reasons)
        if "truncation" in reasons:
            details["trl_dropped"] += trl[index] is None
            details["ours_dropped"] += ours[index] is None
            details["trl_lost_eos"] += trl[index] is not None and tokenizer.eos_token_id not in trl[index]["labels"]
            details["ours_lost_eos"] += ours[index] is not None and tokenizer.eos_token_id not in ours[index]["labels"]
        if "seam_merge" in reasons:
            seam = _first_supervised(ours_full[index]["labels"])
            merged = trl_full[index]["input_ids"][seam - 1 : seam + 1]
            details["trl_straddling_token_supervised"] += _first_supervised(trl_full[index]["labels"]) <= seam
            shown.setdefault("seam_merge", []).append(repr(tokenizer.decode(merged)))
        for reason in reasons - {"identical"}:
            shown.setdefault(reason + "_records", []).append(index)
    return {
        "records": len(records),
        "max_length": max_length,
        "template": template.name,
        "tokenizer": type(tokenizer).__name__ + f"(vocab {len(tokenizer)})",
        "counts": {c: counts[c] for c in CATEGORIES},
        "details": dict(details),
        "examples": {k: v[:examples] for k, v in shown.items()},
    }


def masks_part(args, workdir: Path) -> dict:
    """Part 1 (see module doc)."""
    tokenizer = load_tokenizer(args.tokenizer, workdir)
    template = load_template(args.template, tokenizer)
    records, invalid = load_records(args.records, skip_invalid=True)  # alpaca_5000 has one empty output
    result = compare_masks(records[: args.n], tokenizer, template, args.max_length)
    result["invalid_records_skipped"] = dict(invalid)
    log(f"label masks, ours vs TRL SFTTrainer: {result['records']} records, template {result['template']}, "
        f"max_length {result['max_length']}, {result['tokenizer']}")  # fmt: skip
    for name, count in result["counts"].items():
        log(f"  {name:12s} {count:5d}")
    for name, value in {**result["details"], **result["examples"]}.items():
        log(f"  {name}: {value}")
    return result


# ---------------------------------------------------------------- command line


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("masks", "speed", "all"), default="all")
    parser.add_argument("--records", default=str(DEFAULT_RECORDS), help="Alpaca records (JSON / JSONL / folder)")
    parser.add_argument("--n", type=int, default=500, help="records compared in the mask part")
    parser.add_argument("--tokenizer", default="gpt2", help="gpt2 (shared files), smollm2, or a tokenizer folder")
    parser.add_argument("--template", default="alpaca", help="alpaca, short, chat or a template file")
    parser.add_argument("--max_length", type=int, default=256)
    parser.add_argument("--json", metavar="OUT", help="write all results to this JSON file")
    args = parser.parse_args(argv)
    if args.n < 1 or args.max_length < 1:
        parser.error("--n and --max_length must be >= 1")
    return args


def quiet() -> None:
    """No progress bars or per-example warnings from datasets / transformers / TRL in the printed report."""
    import datasets
    from transformers.utils import logging as hf_logging

    datasets.disable_progress_bars()
    hf_logging.set_verbosity_error()
    for name in ("trl", "datasets"):
        logging.getLogger(name).setLevel(logging.ERROR)


def main(argv=None) -> dict:
    args = parse_args(argv)
    quiet()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.part in ("masks", "all"):
            results["masks"] = masks_part(args, Path(tmp))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    torch.set_num_threads(max(1, torch.get_num_threads()))
    main()
    sys.exit(0)
