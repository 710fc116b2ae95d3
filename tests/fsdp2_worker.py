"""One FSDP2 training run of a tiny hf-llmsys model, for ``tests/test_fsdp2.py``: run alone (1 process, the whole
batch) or under ``torchrun --nproc_per_node 2`` (gloo on the CPU, each rank half of the batch).

Each decoder layer is sharded with ``torch.distributed.fsdp.fully_shard``, then the whole model (torchtitan's
order). The loss of the global batch is the token mean over all of it: each rank's loss is its token sum divided by
the global token count (the Trainer's ``num_items_in_batch``), scaled by the world size before backward because
FSDP averages gradients over ranks. Prints one JSON line: the global loss of every step.

    python tests/fsdp2_worker.py MODEL_TYPE KERNELS OUT.json
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import hf_llmsys
from hf_llmsys import kernels

STEPS, BATCH, SEQ, VOCAB = 3, 4, 24, 96
TINY = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)


def build(model_type: str):
    torch.manual_seed(0)
    if model_type == "llmsys_llama":
        return hf_llmsys.LlmsysLlamaForCausalLM(hf_llmsys.LlmsysLlamaConfig(**TINY, num_key_value_heads=2))
    if model_type == "llmsys_gpt3":
        config = hf_llmsys.LlmsysGPT3Config(**TINY, attention_layout=["local", "strided"], sparse_stride=4,
                                            sliding_window=8, max_position_embeddings=SEQ, bos_token_id=0,
                                            eos_token_id=0)  # fmt: skip
        return hf_llmsys.LlmsysGPT3ForCausalLM(config)
    config = hf_llmsys.LlmsysT5Config(vocab_size=VOCAB, d_model=32, d_ff=64, num_layers=2, num_heads=4, d_kv=8,
                                      dropout_rate=0.0)  # fmt: skip
    return hf_llmsys.LlmsysT5ForConditionalGeneration(config)


def layers(model) -> list[torch.nn.Module]:
    if model.config.is_encoder_decoder:
        return [*model.encoder.layers, *model.decoder.layers]
    return list(model.model.layers)


def main(model_type: str, use_kernels: bool, out: str) -> None:
    distributed = "WORLD_SIZE" in os.environ
    rank, world = (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])) if distributed else (0, 1)
    model = build(model_type).train()
    if use_kernels:
        kernels.apply(model)
    if distributed:
        dist.init_process_group("gloo")
        mesh = init_device_mesh("cpu", (world,))
        for layer in layers(model):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(STEPS):
        ids = torch.randint(1, VOCAB, (BATCH, SEQ), generator=generator)
        labels = ids.clone()
        labels[:, : SEQ // 4] = -100  # a prompt without loss, as instruction tuning has
        labels[0, -5:] = -100  # rows with different label counts: the token mean is not a mean of row means
        local = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
        if model.config.is_encoder_decoder:
            count = int((labels[:, : SEQ // 2] != -100).sum())
            inputs = dict(input_ids=ids[local], labels=labels[local, : SEQ // 2])
        else:
            count = int((labels[:, 1:] != -100).sum())
            inputs = dict(input_ids=ids[local], labels=labels[local])
        loss = model(**inputs, num_items_in_batch=torch.tensor(count)).loss  # local token sum / global count
        (loss * world).backward()
        optimizer.step()
        optimizer.zero_grad()
        total = loss.detach().clone()
        if distributed:
            dist.all_reduce(total)
        losses.append(total.item())
    if rank == 0:
        with open(out, "w") as file:
            json.dump(losses, file)
    if distributed:  # every rank done before teardown (gloo aborted a rank that exited mid-collective)
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] == "true", sys.argv[3])
