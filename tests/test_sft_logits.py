"""The LM head only at supervised positions (`training/supervised_logits.py`) == the model's own full-logits loss.

Loss and every parameter's gradient agree to 1e-6 (fp32) for our decoders and transformers' Llama and GPT-2, for
padded batches, best-fit-decreasing packed rows and flattened rows, with the Trainer's ``num_items_in_batch``
(a token sum over the optimizer step) and without it (a mean, as in evaluation).
"""

from __future__ import annotations

import pytest
import torch
from sft_fixtures import (
    base_model_config,
    one_thread,  # noqa: F401  (autouse: one intra-op thread for this module)
    reverse_task,
    task_tokenizer,
)
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    DataCollatorForSeq2Seq,
    DataCollatorWithFlattening,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    TrainingArguments,
)

from hf_llmsys.data import SFTExampleEncoder, build_sft_dataset, load_template
from hf_llmsys.data.sft_packing import PackedRowsCollator, pack_examples
from hf_llmsys.kernels import applied
from hf_llmsys.training.supervised_logits import (
    KeepSupervisedLogits,
    SupervisedLogitsLoss,
    enable_chunked_loss,
    supervised_positions,
    supports_supervised_logits,
)

RECORDS = reverse_task(12, seed=7, length=(1, 8))
TOKENIZER = task_tokenizer(RECORDS)


def model_for(name: str):
    torch.manual_seed(0)
    tok = TOKENIZER
    if name == "transformers_llama":
        config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, pad_token_id=tok.pad_token_id)  # fmt: skip
        return LlamaForCausalLM(config).eval()
    if name == "transformers_gpt2":
        config = GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=4, n_positions=128)
        return GPT2LMHeadModel(config).eval()
    config = base_model_config(name, tok, hidden=32)
    return AutoModelForCausalLM.from_config(config).eval()


def examples(response_only: bool = True) -> list[dict]:
    dataset, _ = build_sft_dataset(RECORDS, SFTExampleEncoder(TOKENIZER, load_template("short"), 64))
    rows = [dict(r) for r in dataset]
    if not response_only:
        rows = [{"input_ids": r["input_ids"], "labels": list(r["input_ids"])} for r in rows]
    return rows


def batch_for(layout: str, rows: list[dict]) -> dict:
    if layout == "padded":
        return DataCollatorForSeq2Seq(TOKENIZER, label_pad_token_id=-100)(rows)
    if layout == "flatten":
        return DataCollatorWithFlattening(return_position_ids=True, separator_id=-100)(rows)
    from datasets import Dataset

    packed = pack_examples(Dataset.from_list(rows), 40)
    assert len(packed) >= 2  # several rows, so the collator fills the shorter ones
    return PackedRowsCollator(TOKENIZER.pad_token_id)([dict(r) for r in packed])


def loss_and_grads(model, batch: dict, supervised: bool, num_items) -> tuple[torch.Tensor, dict]:
    model.zero_grad()
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    extra = {} if num_items is None else {"num_items_in_batch": num_items}
    if supervised:
        outputs = model(**inputs, logits_to_keep=supervised_positions(batch["labels"]), use_cache=False)
        loss = SupervisedLogitsLoss()(outputs, batch["labels"], num_items)
    else:
        loss = model(**inputs, labels=batch["labels"], use_cache=False, **extra).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", ["llmsys_llama", "llmsys_gpt3", "transformers_llama", "transformers_gpt2"])
@pytest.mark.parametrize("layout", ["padded", "bfd_rows", "flatten"])
@pytest.mark.parametrize("normalise", ["num_items_in_batch", "mean"])
def test_supervised_logits_give_the_full_logits_loss_and_gradients(name, layout, normalise):
    model = model_for(name)
    batch = batch_for(layout, examples())
    num_items = None
    if normalise == "num_items_in_batch":  # as the Trainer counts it: labels[..., 1:] over the step, times 2
        num_items = 2 * (batch["labels"][:, 1:] != -100).sum()  # (as if a second micro-batch shared the step)
    full_loss, full_grads = loss_and_grads(model, batch, supervised=False, num_items=num_items)
    loss, grads = loss_and_grads(model, batch, supervised=True, num_items=num_items)
    torch.testing.assert_close(loss, full_loss, rtol=1e-6, atol=1e-6)
    assert grads.keys() == full_grads.keys() and len(grads) > 0
    for n in grads:
        torch.testing.assert_close(grads[n], full_grads[n], rtol=1e-6, atol=1e-6, msg=n)


def test_the_head_sees_only_the_supervised_positions():
    """The model returns K rows of logits, K = supervised next labels, fewer than the batch's tokens."""
    model = model_for("llmsys_llama")
    batch = KeepSupervisedLogits(DataCollatorForSeq2Seq(TOKENIZER, label_pad_token_id=-100))(examples())
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.no_grad():
        logits = model(**inputs, use_cache=False).logits
    k = int((batch["labels"][:, 1:] != -100).sum())
    assert logits.shape == (k, len(TOKENIZER)) and k < batch["input_ids"].numel() / 2


def test_lora_model_uses_the_supervised_head_with_the_same_gradients():
    from hf_llmsys.training.lora import add_lora

    model = add_lora(model_for("llmsys_llama"), 4, 8.0, 0.0, None)
    assert supports_supervised_logits(model, TrainingArguments("unused"))[0]
    batch = batch_for("bfd_rows", examples())
    full_loss, full_grads = loss_and_grads(model, batch, supervised=False, num_items=None)
    loss, grads = loss_and_grads(model, batch, supervised=True, num_items=None)
    torch.testing.assert_close(loss, full_loss, rtol=1e-6, atol=1e-6)
    assert grads.keys() == full_grads.keys() and all("lora_" in n for n in grads)
    for n in grads:
        torch.testing.assert_close(grads[n], full_grads[n], rtol=1e-6, atol=1e-6, msg=n)


def test_not_used_where_it_would_change_the_loss():
    args = TrainingArguments("unused")
    assert supports_supervised_logits(model_for("llmsys_llama"), args) == (True, "")
    t5 = AutoModelForSeq2SeqLM.from_config(base_model_config("llmsys_t5", TOKENIZER, hidden=32))
    usable, why = supports_supervised_logits(t5, args)
    assert not usable and "encoder-decoder" in why
    config = base_model_config("llmsys_llama", TOKENIZER, hidden=32)
    config.z_loss_coefficient = 1e-4
    usable, why = supports_supervised_logits(AutoModelForCausalLM.from_config(config), args)
    assert not usable and "z-loss" in why
    smoothing = TrainingArguments("unused", label_smoothing_factor=0.1)
    usable, why = supports_supervised_logits(model_for("llmsys_llama"), smoothing)
    assert not usable and "label smoothing" in why


def test_a_model_ignoring_the_mask_is_a_clear_error():
    logits = torch.zeros(2, 5, 11)  # (B, T, V): what a forward that does not slice would return
    labels = torch.tensor([[-100, -100, 3, 4, -100], [-100, 1, 2, -100, -100]])
    with pytest.raises(ValueError, match="logits_on_labels_only false"):
        SupervisedLogitsLoss()({"logits": logits}, labels)


@pytest.mark.parametrize("name", ["llmsys_llama", "llmsys_gpt3"])
@pytest.mark.parametrize("layout", ["padded", "bfd_rows", "flatten"])
def test_chunked_loss_gives_the_full_logits_loss_and_gradients(name, layout):
    """`enable_chunked_loss` (the SFT default for our models): the model's own chunked loss in training mode equals
    the full-logits loss on SFT batches, with the Trainer's num_items_in_batch."""
    model = model_for(name).train()  # the tiny configs have no dropout
    batch = batch_for(layout, examples())
    num_items = (batch["labels"][:, 1:] != -100).sum()
    full_loss, full_grads = loss_and_grads(model, batch, supervised=False, num_items=num_items)
    assert enable_chunked_loss(model, 7, TrainingArguments("unused")) == (True, "")
    assert model(**{k: v for k, v in batch.items()}, use_cache=False).logits is None
    loss, grads = loss_and_grads(model, batch, supervised=False, num_items=num_items)
    torch.testing.assert_close(loss, full_loss, rtol=1e-6, atol=1e-6)
    assert grads.keys() == full_grads.keys()
    for n in grads:
        torch.testing.assert_close(grads[n], full_grads[n], rtol=1e-5, atol=1e-6, msg=n)


def test_chunked_loss_only_where_it_is_the_models_loss():
    args = TrainingArguments("unused")
    usable, why = enable_chunked_loss(model_for("transformers_llama"), 64, args)
    assert not usable and "no chunked loss" in why
    model = model_for("llmsys_llama")
    assert enable_chunked_loss(model, 512, args) == (True, "") and applied(model)["loss_chunk_size"] == 512
    assert enable_chunked_loss(model, 0, args) == (False, "--loss_chunk_size 0")
    assert applied(model)["loss_chunk_size"] == 0 and applied(model)["norms"]  # the rest of the speed layer stays
    usable, why = enable_chunked_loss(model, 64, TrainingArguments("unused", label_smoothing_factor=0.1))
    assert not usable and "label smoothing" in why and applied(model)["loss_chunk_size"] == 0
    assert enable_chunked_loss(model, 64, args, kernels=False) == (False, "--kernels false")
    assert applied(model) is None
