"""Conversations (messages / ShareGPT) through the chat template, loss on assistant turns only (issue 20 section 2).

A tiny byte-level BPE with ChatML specials and a ChatML template (with a default system turn, as SmolLM2's) for
the fast tests; SmolLM2-135M-Instruct's own tokenizer and template when it is fetched (scripts/fetch_smollm2.py).
Also: multi-turn packing without leaks, the missing-template error, and NEFTune noise only in training.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
from datasets import Dataset
from sft_fixtures import base_model_config, byte_bpe, one_thread, save_base_model  # noqa: F401

from hf_llmsys.data.conversation_labels import ConversationEncoder, ConversationTemplate, assistant_spans
from hf_llmsys.data.conversation_records import check_conversations, load_sft_records
from hf_llmsys.data.sft_labels import IGNORE_INDEX
from hf_llmsys.data.sft_packing import PackedRowsCollator, pack_examples

CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CONVERSATIONS = [
    {"messages": [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Name the capital of France."},
        {"role": "assistant", "content": "Paris"},
        {"role": "user", "content": "And of Italy?"},
        {"role": "assistant", "content": "Rome, of course."},
    ]},
    {"conversations": [  # ShareGPT, no system turn: the template writes its default one
        {"from": "human", "value": "Add the numbers 2 and 3."},
        {"from": "gpt", "value": "5"},
        {"from": "human", "value": "Say hi with an emoji."},
        {"from": "gpt", "value": ":) hi"},
    ]},
    {"messages": [{"role": "user", "content": "Continue."}, {"role": "assistant", "content": "\n\nIndented\n  text"}]},
]  # fmt: skip


def chatml_tokenizer():
    tok = copy.deepcopy(byte_bpe())
    tok.add_tokens(["<|im_start|>", "<|im_end|>"], special_tokens=True)
    tok.split_special_tokens = False  # the template's markers are single special tokens (as SmolLM2's)
    tok.chat_template = CHATML
    tok.eos_token = "<|im_end|>"  # the end of an assistant turn is where generation stops (SmolLM2's convention)
    return tok


def runs(ids, labels):
    """Contiguous supervised runs of ids."""
    out, current = [], []
    for t, lab in zip(ids, labels, strict=True):
        if lab != IGNORE_INDEX:
            current.append(t)
        elif current:
            out.append(current)
            current = []
    return out + ([current] if current else [])


def records():
    return check_conversations(CONVERSATIONS)[0]


def test_messages_and_sharegpt_normalise_to_one_form(tmp_path):
    kept = records()
    assert kept[1]["messages"][0] == {"role": "user", "content": "Add the numbers 2 and 3."}
    assert [m["role"] for m in kept[1]["messages"]] == ["user", "assistant", "user", "assistant"]
    path = tmp_path / "chats.jsonl"
    path.write_text("\n".join(json.dumps(c) for c in CONVERSATIONS))
    loaded, dropped, kind = load_sft_records(path)
    assert kind == "conversation" and loaded == kept and not dropped
    bad = [
        ({"messages": []}, "non-empty list"),
        ({"messages": [{"role": "robot", "content": "x"}]}, r"messages\[0\].role is 'robot'"),
        ({"conversations": [{"from": "human", "value": 3}]}, r"conversations\[0\].value must be a string"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "no non-empty assistant turn"),
        ({"instruction": "x", "output": "y"}, "one kind of record per run"),
    ]
    for record, message in bad:
        with pytest.raises(ValueError, match=f"record 1: .*{message}"):
            check_conversations([CONVERSATIONS[0], record], "chats.jsonl")


@pytest.mark.parametrize("turns", ["all", "last"])
def test_rendered_template_and_only_assistant_content_and_end_of_turn_supervised(turns):
    tok = chatml_tokenizer()
    encoder = ConversationEncoder(tok, ConversationTemplate(tok), 512, assistant_turns=turns)
    for record in records():
        messages = record["messages"]
        example, events = encoder.encode(record)
        assert events == []
        rendered = tok.apply_chat_template(messages, tokenize=False)
        assert example["input_ids"] == tok(rendered, add_special_tokens=False)["input_ids"]
        assert tok.decode(example["input_ids"]) == rendered  # the template's text, byte for byte
        # the reply, its end of turn and the newline the template writes before the next turn (TRL's prompt-completion
        # rule, conversation_labels.py's module doc)
        replies = [m["content"] + "<|im_end|>\n" for m in messages if m["role"] == "assistant"]
        expected = replies if turns == "all" else replies[-1:]
        assert [tok.decode(r) for r in runs(example["input_ids"], example["labels"])] == expected
        # generation starts from exactly the training prefix of the last reply
        prefix, _ = encoder.generation_prefix(record)
        assert tok.decode(prefix) == tok.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True)
        assert example["input_ids"][: len(prefix)] == prefix and example["labels"][len(prefix)] != IGNORE_INDEX


def test_spans_are_found_without_generation_markers():
    tok = chatml_tokenizer()
    assert "{% generation %}" not in tok.chat_template
    text, spans = assistant_spans(tok, records()[0]["messages"])
    assert [text[s:e] for s, e in spans] == ["Paris<|im_end|>\n", "Rome, of course.<|im_end|>\n"]


def test_no_chat_template_names_the_flag(tmp_path):
    with pytest.raises(ValueError, match=r"--template chat: the records are conversations.*--template FILE.jinja"):
        ConversationTemplate(byte_bpe())
    tok = copy.deepcopy(byte_bpe())
    path = tmp_path / "chatml.jinja"
    path.write_text(CHATML)
    template = ConversationTemplate(tok, str(path))
    assert tok.chat_template == CHATML and template.name == "chatml.jinja"
    with pytest.raises(ValueError, match="--template missing.jinja"):
        ConversationTemplate(tok, "missing.jinja")


def test_template_that_is_not_prefix_stable_is_refused():
    tok = chatml_tokenizer()
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}|{% endfor %}{{ messages | length }}"
    with pytest.raises(ValueError, match="not render turn 1 as a prefix"):
        ConversationEncoder(tok, ConversationTemplate(tok), 512).encode(records()[2])


def test_long_conversation_truncated_or_dropped():
    tok = chatml_tokenizer()
    record = records()[0]
    full, _ = ConversationEncoder(tok, ConversationTemplate(tok), 10_000).encode(record)
    cut = len(full["input_ids"]) - 3
    example, events = ConversationEncoder(tok, ConversationTemplate(tok), cut).encode(record)
    assert events == ["response_truncated"] and example["input_ids"] == full["input_ids"][:cut]
    drop = ConversationEncoder(tok, ConversationTemplate(tok), cut, response_overflow="drop").encode(record)
    assert drop == (None, ["response_too_long"])
    first_reply = full["labels"].index(next(t for t in full["labels"] if t != IGNORE_INDEX))
    assert ConversationEncoder(tok, ConversationTemplate(tok), first_reply).encode(record) == (
        None,
        ["no_response_left"],
    )


def test_multi_turn_packing_does_not_leak_between_conversations():
    """Packed rows of multi-turn examples: each example's logits equal its logits alone; labels unchanged."""
    from transformers import AutoModelForCausalLM

    tok = chatml_tokenizer()
    tok.pad_token = "<|im_end|>"
    encoder = ConversationEncoder(tok, ConversationTemplate(tok), 512)
    examples = [encoder.encode(r)[0] for r in records()]
    packed_rows = pack_examples(Dataset.from_list(examples), 512)
    assert len(packed_rows) == 1  # all three conversations share one row
    batch = PackedRowsCollator(tok.pad_token_id)([dict(r) for r in packed_rows])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(base_model_config("llmsys_llama", tok, hidden=32, max_positions=512))
    model.eval()
    with torch.no_grad():
        packed = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits[0]
    order = pack_order(packed_rows[0]["input_ids"], examples)
    at = 0
    for index in order:
        ex = examples[index]
        n = len(ex["input_ids"])
        with torch.no_grad():
            alone = model(input_ids=torch.tensor([ex["input_ids"]]), use_cache=False).logits[0]
        torch.testing.assert_close(packed[at : at + n], alone, rtol=1e-5, atol=1e-5)
        assert batch["labels"][0, at : at + n].tolist() == [IGNORE_INDEX] + ex["labels"][1:]
        assert batch["position_ids"][0, at : at + n].tolist() == list(range(n))
        at += n


def pack_order(row_ids, examples):
    """Which example sits where in a packed row (best-fit decreasing reorders them)."""
    order, at = [], 0
    while at < len(row_ids):
        index = next(
            i
            for i, e in enumerate(examples)
            if i not in order and row_ids[at : at + len(e["input_ids"])] == e["input_ids"]
        )
        order.append(index)
        at += len(examples[index]["input_ids"])
    return order


def test_sft_cli_trains_conversations_and_refuses_a_tokenizer_without_template(tmp_path, capsys):
    from hf_llmsys.training import sft

    tok = chatml_tokenizer()
    tok.pad_token = "<|im_end|>"
    base = save_base_model(tmp_path / "base", "llmsys_llama", tok, hidden=32, max_positions=256)
    data = tmp_path / "chats.jsonl"
    data.write_text("\n".join(json.dumps(c) for c in CONVERSATIONS * 4))
    quiet = {"disable_tqdm": True, "report_to": "none", "save_steps": 10_000, "max_steps": 2, "max_length": 256}
    results = sft(base, str(data), tmp_path / "out", assistant_turns="last", packing=True, num_generation_examples=1,
                  generation_max_new_tokens=4, **quiet)  # fmt: skip
    assert results["records_format"] == "conversation" and results["template"] == "chat"
    assert results["assistant_turns"] == "last" and results["global_step"] == 2
    (shown,) = results["generations"]
    assert set(shown) == {"prompt", "output", "generated"}
    saved = json.loads((tmp_path / "out" / "prompt_template.json").read_text())
    assert saved == {"type": "conversation", "name": "chat"}
    # a base whose tokenizer has no chat template: refused before anything is written, naming --template
    plain = copy.deepcopy(byte_bpe())
    plain.pad_token = plain.eos_token
    bare = save_base_model(tmp_path / "bare", "llmsys_llama", plain, hidden=32, max_positions=256)
    with pytest.raises(ValueError, match="--template"):
        sft(bare, str(data), tmp_path / "out2", **quiet)
    assert not (tmp_path / "out2").exists()


@pytest.mark.parametrize("model_type", ["llmsys_llama", "llmsys_gpt3"])
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_neftune_noise_in_training_only(model_type, lora, tmp_path):
    """--neftune_noise_alpha (the Trainer's TrainingArguments field) on our models: the input embeddings' output
    carries uniform noise within NEFTune's bound alpha / sqrt(L * d) in training steps, none at evaluation (inside
    or after training) or generation, and the Trainer's hook is gone once train() returns."""
    from transformers import AutoModelForCausalLM, DataCollatorForSeq2Seq, Trainer, TrainerCallback

    from hf_llmsys.training.lora import add_lora
    from hf_llmsys.training.sft_arguments import SFTTrainingArguments

    tok = chatml_tokenizer()
    tok.pad_token = "<|im_end|>"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(base_model_config(model_type, tok, hidden=32, max_positions=256))
    if lora:
        model = add_lora(model, 4, 8.0, 0.0, None)
    encoder = ConversationEncoder(tok, ConversationTemplate(tok), 256)
    ds = Dataset.from_list([encoder.encode(r)[0] for r in records()])
    embed = model.get_input_embeddings()
    calls = []  # (training?, output - clean embedding lookup, L * d)

    def after_neftune(module, inputs, output):  # appended after the Trainer's hook: sees the noisy output
        clean = module.weight[inputs[0]]
        calls.append((module.training, (output - clean).detach(), output.shape[1] * output.shape[2]))

    class RecordEmbeddings(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):  # after the Trainer attached NEFTune
            assert getattr(embed, "neftune_noise_alpha", None) == alpha
            embed.register_forward_hook(after_neftune)

    alpha = 5.0
    args = SFTTrainingArguments(
        output_dir=str(tmp_path), neftune_noise_alpha=alpha, max_steps=2, per_device_train_batch_size=3,
        report_to="none", disable_tqdm=True, save_strategy="no", eval_strategy="steps", eval_steps=1,
        per_device_eval_batch_size=3, use_cpu=True,
    )  # fmt: skip
    right = copy.copy(tok)
    right.padding_side = "right"
    collator = DataCollatorForSeq2Seq(right, label_pad_token_id=-100)
    trainer = Trainer(model=model, args=args, train_dataset=ds, eval_dataset=ds, data_collator=collator,
                      callbacks=[RecordEmbeddings()])  # fmt: skip
    trainer.train()
    training = [c for c in calls if c[0]]
    evaluation = [c for c in calls if not c[0]]
    assert len(training) == 2 and len(evaluation) == 2  # two steps, an evaluation after each
    for _, noise, dims in training:
        bound = alpha / dims**0.5
        assert 0.5 * bound < noise.abs().max() <= bound * (1 + 1e-5)
    assert all(torch.equal(noise, torch.zeros_like(noise)) for _, noise, _ in evaluation)
    assert not hasattr(embed, "neftune_noise_alpha")  # deactivated after train()
    calls.clear()
    batch = collator([ds[0]])
    trainer.evaluate()
    model.eval()
    with torch.no_grad():
        out = model.generate(input_ids=batch["input_ids"], max_new_tokens=3, do_sample=False,
                             pad_token_id=tok.pad_token_id)  # fmt: skip
    assert out.shape[1] == batch["input_ids"].shape[1] + 3
    model.train()  # even a training-mode forward is clean once train() has returned
    model(input_ids=batch["input_ids"])
    assert len(calls) >= 5
    assert all(torch.equal(noise, torch.zeros_like(noise)) for _, noise, _ in calls)


def test_smollm2_own_chat_template_supervises_only_assistant_content_and_end_of_turn():
    """The real case: SmolLM2-135M-Instruct's tokenizer and its own chat template (no generation markers)."""
    from transformers import AutoTokenizer

    from hf_llmsys.checkpoints import find_smollm2

    folder = find_smollm2()
    if folder is None:
        pytest.skip("SmolLM2 checkpoint not converted: run python scripts/fetch_smollm2.py")
    tok = AutoTokenizer.from_pretrained(folder)
    assert "{% generation %}" not in tok.chat_template and tok.eos_token == "<|im_end|>"
    encoder = ConversationEncoder(tok, ConversationTemplate(tok), 2048)
    for record in records():
        messages = record["messages"]
        example, _ = encoder.encode(record)
        rendered = tok.apply_chat_template(messages, tokenize=False)
        assert example["input_ids"] == tok.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]
        assert tok.decode(example["input_ids"]) == rendered
        replies = [m["content"] + "<|im_end|>\n" for m in messages if m["role"] == "assistant"]
        decoded = [tok.decode(r) for r in runs(example["input_ids"], example["labels"])]
        assert len(decoded) == len(replies)
        for got, reply in zip(decoded, replies, strict=True):
            # a token straddling the span's start is supervised: GPT-2-style BPE merges the generation prompt's
            # "\n" with a reply starting "\n\n" into one "\n\n\n" token
            assert got.endswith(reply) and "<|im_start|>assistant\n".endswith(got[: len(got) - len(reply)])
        if messages[-1]["content"].startswith("\n"):  # the straddle actually happens on this record
            assert decoded[-1] == "\n" + replies[-1]
        if messages[0]["role"] != "system":  # SmolLM2's template writes its default system turn
            assert rendered.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")


def test_masks_equal_transformers_generation_markers_without_needing_them():
    """Reference: transformers' ``return_assistant_tokens_mask`` on the same ChatML template WITH {% generation %}
    markers around each reply + end-of-turn + the newline after it (what TRL's assistant_only_loss uses) gives our
    mask, found without."""
    tok = chatml_tokenizer()
    marked = copy.deepcopy(tok)
    marked.chat_template = CHATML.replace(
        "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n",
        "<|im_start|>{{ message['role'] }}\n{% if message['role'] == 'assistant' %}{% generation %}"
        "{{ message['content'] }}<|im_end|>{{ '\\n' }}{% endgeneration %}{% else %}{{ message['content'] }}<|im_end|>"
        "{{ '\\n' }}{% endif %}",  # (chat templates trim the newline after a block tag)
    )
    assert marked.chat_template != CHATML
    encoder = ConversationEncoder(tok, ConversationTemplate(tok), 512)
    for record in records():
        example, _ = encoder.encode(record)
        assert example["input_ids"].count(tok.convert_tokens_to_ids("<|im_end|>")) == len(record["messages"]) + (
            record["messages"][0]["role"] != "system"
        )
        ref = marked.apply_chat_template(
            record["messages"], tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        assert ref["input_ids"] == example["input_ids"]
        assert ref["assistant_masks"] == [int(t != IGNORE_INDEX) for t in example["labels"]]
