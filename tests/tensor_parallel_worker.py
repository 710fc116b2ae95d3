"""One tensor-parallel load of a saved hf-llmsys decoder, for ``tests/test_tensor_parallel.py``: run under
``torchrun --nproc_per_node 2`` (gloo on the CPU). Every rank loads the folder twice, with ``tp_plan="auto"`` (the
config's ``base_model_tp_plan``) and whole, and rank 0 writes one JSON: the largest logit difference, whether greedy
generation with the cache gives the same tokens, and each sharded weight's local shape beside its full shape.

    torchrun --nproc_per_node 2 tests/tensor_parallel_worker.py MODEL_DIR OUT.json
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from transformers import AutoModelForCausalLM
from transformers.distributed import DistributedConfig

import hf_llmsys  # noqa: F401  (registers the model types)


def main(folder: str, out: str) -> None:
    parallel = AutoModelForCausalLM.from_pretrained(folder, distributed_config=DistributedConfig(tp_plan="auto"))
    whole = AutoModelForCausalLM.from_pretrained(folder)
    ids = torch.arange(1, 21).remainder(parallel.config.vocab_size)[None]
    with torch.no_grad():
        difference = (parallel(ids).logits - whole(ids).logits).abs().max().item()
        generated = [m.generate(ids[:, :8], max_new_tokens=6, do_sample=False) for m in (parallel, whole)]
    shapes = {name: [list(p.to_local().shape), list(p.shape)] for name, p in parallel.named_parameters()
              if hasattr(p, "to_local")}  # fmt: skip
    if dist.get_rank() == 0:
        result = {"max_logit_difference": difference, "same_generation": bool(torch.equal(*generated)),
                  "sharded": shapes}  # fmt: skip
        with open(out, "w", encoding="utf-8") as file:
            json.dump(result, file)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:3])
