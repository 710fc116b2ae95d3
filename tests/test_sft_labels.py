"""Instruction-tuning data: records, templates, label masks at the seam, truncation, bad input."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset
from sft_fixtures import RECORDS, byte_bpe, gpt2, sentencepiece_like

from hf_llmsys.data.alpaca_records import check_records, load_records, mix_records
from hf_llmsys.data.conversation_labels import ConversationEncoder
from hf_llmsys.data.prompt_templates import (
    ALPACA,
    SHORT,
    PromptTemplate,
    alpaca_messages,
    load_template,
    save_template,
)
from hf_llmsys.data.sft_labels import IGNORE_INDEX, SFTExampleEncoder, build_sft_dataset, encode_records
from hf_llmsys.evaluation.alpaca import format_prompt

TOKENIZERS = {"byte_bpe": lambda tmp: byte_bpe(), "sentencepiece": lambda tmp: sentencepiece_like("llama")}


@pytest.fixture(params=["byte_bpe", "sentencepiece", "gpt2"])
def tokenizer(request, tmp_path):
    if request.param == "gpt2":
        tok = gpt2(tmp_path / "gpt2")
        if tok is None:
            pytest.skip("GPT-2 tokenizer files absent from the shared data folder")
        return tok
    return TOKENIZERS[request.param](tmp_path)


def supervised(example):
    return [t for t in example["labels"] if t != IGNORE_INDEX]


@pytest.mark.parametrize("template", [ALPACA, SHORT], ids=lambda t: t.name)
def test_prompt_tokens_masked_response_and_eos_supervised(tokenizer, template):
    encoder = SFTExampleEncoder(tokenizer, template, max_length=512)
    for record in RECORDS:
        example, events = encoder.encode(record)
        assert events == []
        ids, labels = example["input_ids"], example["labels"]
        prompt_ids = encoder.encode_prompt(record)
        n = len(prompt_ids)
        assert ids[:n] == prompt_ids  # generation starts from exactly the training prompt ids
        assert labels[:n] == [IGNORE_INDEX] * n  # no prompt token supervised
        assert all(t != IGNORE_INDEX for t in labels[n:])  # first response token ... EOS all supervised
        assert labels[n] == ids[n] and labels[-1] == tokenizer.eos_token_id == ids[-1]
        prompt_text, response_text = template.split(record)
        whole = tokenizer(prompt_text + response_text, add_special_tokens=False)["input_ids"]
        assert ids[len(encoder.lead) : -1] == whole  # the whole text tokenized at once (test_sft_seams.py)
        if tokenizer.backend_tokenizer.decoder.__class__.__name__ == "ByteLevel":
            assert tokenizer.decode(supervised(example)[:-1]).endswith(response_text)  # (a straddling token's
            # prompt characters in front)
        assert response_text.strip() == record["output"].strip()


def test_prompt_text_is_stanford_alpaca(tokenizer):
    for record in RECORDS:
        prompt, response = ALPACA.split(record)
        assert prompt == format_prompt({"input": "", **record})  # the Stanford templates, byte for byte
        assert response == record["output"]  # glued to "### Response:" as in their train.py


def test_seam_merge_that_breaks_alpaca_train_py_is_handled():
    """With a template ending in a space, BPE merges the space into the first answer token ("ĠParis").

    Alpaca's train.py (mask ``len(tokenize(prompt))`` labels of ``tokenize(prompt + answer)``) then masks the first
    answer token; our split moves the space to the response, so it is supervised.
    """
    tok = byte_bpe()
    record = {"instruction": "Name the capital of France.", "input": "", "output": "Paris"}
    prompt_with_space = "### Instruction: Name the capital of France. ### Response: "
    source = tok(prompt_with_space, add_special_tokens=False)["input_ids"]
    full = tok(prompt_with_space + "Paris", add_special_tokens=False)["input_ids"]
    assert full[: len(source)] != source  # the seam merges: the naive boundary is wrong
    naive_supervised = tok.decode(full[len(source) :])
    assert naive_supervised != " Paris"
    example, _ = SFTExampleEncoder(tok, SHORT, 128).encode(record)
    assert tok.decode(supervised(example)) == " Paris" + tok.eos_token
    assert tok.decode(example["input_ids"]) == prompt_with_space + "Paris" + tok.eos_token  # same text, byte for byte


def test_bos_once_and_t5_encoder_decoder_example():
    llama_like = sentencepiece_like("llama")
    ex, _ = SFTExampleEncoder(llama_like, ALPACA, 256).encode(RECORDS[1])
    assert ex["input_ids"][0] == llama_like.bos_token_id and ex["input_ids"].count(llama_like.bos_token_id) == 1
    t5_like = sentencepiece_like("t5")
    encoder = SFTExampleEncoder(t5_like, SHORT, 256, is_encoder_decoder=True)
    ex, _ = encoder.encode(RECORDS[1])
    prompt, response = SHORT.split(RECORDS[1])
    assert ex["input_ids"] == t5_like(prompt)["input_ids"]  # the encoder sees instruction + input, then </s>
    assert "Translate to French." in t5_like.decode(ex["input_ids"]) and "Good morning" in t5_like.decode(
        ex["input_ids"]
    )
    assert ex["labels"] == t5_like(response)["input_ids"]  # response + </s>, all supervised
    assert ex["labels"][-1] == t5_like.eos_token_id


def test_t5_decoder_input_is_labels_shifted_right():
    from hf_llmsys.models import LlmsysT5Config, LlmsysT5ForConditionalGeneration

    tok = sentencepiece_like("t5")
    config = LlmsysT5Config.from_preset("debug", vocab_size=len(tok), pad_token_id=0, decoder_start_token_id=0)
    model = LlmsysT5ForConditionalGeneration(config)
    ex, _ = SFTExampleEncoder(tok, SHORT, 64, is_encoder_decoder=True).encode(RECORDS[0])
    import torch

    labels = torch.tensor([ex["labels"]])
    shifted = model.prepare_decoder_input_ids_from_labels(labels=labels)
    assert shifted[0, 0].item() == 0 and shifted[0, 1:].tolist() == ex["labels"][:-1]


def long_record(n_words: int = 200, n_out: int = 3) -> dict:
    return {
        "instruction": "Summarise the text.",
        "input": " ".join(["word"] * n_words),
        "output": " ".join(["short"] * n_out),
    }


@pytest.mark.parametrize("side", ["middle", "left"])
def test_prompt_cut_before_response(side):
    tok = byte_bpe()
    encoder = SFTExampleEncoder(tok, SHORT, max_length=40, prompt_truncation=side)
    record = long_record()
    example, events = encoder.encode(record)
    assert events == ["prompt_truncated"] and len(example["input_ids"]) == 40
    _, response = SHORT.split(record)
    assert tok.decode(supervised(example)) == response + tok.eos_token  # the whole response and its EOS survive
    prompt_text = tok.decode(
        [t for t, lab in zip(example["input_ids"], example["labels"], strict=True) if lab == IGNORE_INDEX]
    )
    assert prompt_text.endswith("### Response:")  # the response marker stays next to the response
    assert prompt_text.startswith("### Instruction:") == (side == "middle")


def test_long_response_truncated_or_dropped_and_counted():
    tok = byte_bpe()
    records = [long_record(100, 60), RECORDS[0]]
    ds, stats = encode_records(records, tok, SHORT, 48)
    assert stats["examples"] == 2 and stats["response_truncated"] == 1 and stats["prompt_truncated"] == 1
    assert all(len(ids) <= 48 for ids in ds["input_ids"])
    assert all(any(t != IGNORE_INDEX for t in labels) for labels in ds["labels"])  # never an all -100 row
    ds, stats = encode_records(records, tok, SHORT, 48, response_overflow="drop")
    assert stats["examples"] == 1 and stats["dropped"] == {"response_too_long": 1}


def test_max_length_below_template_length_is_an_error():
    with pytest.raises(ValueError, match="--max_length 10 is below the template's own length"):
        SFTExampleEncoder(byte_bpe(), ALPACA, 10)


def test_template_errors(tmp_path):
    with pytest.raises(ValueError, match=r"no \{instruction\} slot"):
        PromptTemplate("t", "Q: {input} A: {output}", "A: {output}")
    with pytest.raises(ValueError, match=r"response slot \{output\} must occur exactly once"):
        PromptTemplate("t", "Q: {instruction} A:", "Q: {instruction} A:")
    path = tmp_path / "t.txt"
    path.write_text("Question: {instruction}\nAnswer:")
    with pytest.raises(ValueError, match=r"\{output\}"):
        load_template(path)
    with pytest.raises(ValueError, match="neither a template name"):
        load_template(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="no chat_template"):
        load_template("chat", byte_bpe())


def test_user_template_file_and_saved_round_trip(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(
        json.dumps(
            {"with_input": "Q: {instruction}\n{input}\nA: {output}", "without_input": "Q: {instruction}\nA: {output}"}
        )
    )
    template = load_template(path)
    assert template.split(RECORDS[2]) == ("Q: Add the numbers.\n2 and 3\nA:", " 5")
    assert template.split(RECORDS[0]) == ("Q: Give three tips for staying healthy.\nA:", " Eat well, sleep, and move.")
    save_template(template, tmp_path)
    assert load_template(tmp_path).split(RECORDS[2]) == template.split(RECORDS[2])
    save_template(ALPACA, tmp_path)
    assert load_template(tmp_path) == ALPACA


def test_chat_template_boundary():
    tok = sentencepiece_like("llama")
    tok = type(tok)(tokenizer_object=tok.backend_tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    tok.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    )
    template = load_template("chat", tok)  # an Alpaca record = a one-turn conversation (conversation_labels.py)
    assert template.end_of_turn == "</s>\n"
    assert not template.appends_eos  # the chat template's end of turn is the EOS already: none appended
    encoder = ConversationEncoder(tok, template, 256)
    example, _ = encoder.encode(RECORDS[1])
    prefix, _ = encoder.generation_prefix(RECORDS[1])
    # generation starts from exactly the generation prompt (its newline included); the reply and end of turn learnt
    prompt = tok.apply_chat_template(alpaca_messages(RECORDS[1])[:1], tokenize=False, add_generation_prompt=True)
    assert prompt == "<|user|>\nTranslate to French.\n\nGood morning, friend.</s>\n<|assistant|>\n"
    assert prefix == tok(prompt, add_special_tokens=False)["input_ids"]
    whole = tok(tok.apply_chat_template(alpaca_messages(RECORDS[1]), tokenize=False), add_special_tokens=False)
    assert example["input_ids"] == whole["input_ids"] and supervised(example) == whole["input_ids"][len(prefix) :]
    assert supervised(example).count(tok.eos_token_id) == 1


def test_bad_records_name_index_and_field():
    cases = [
        ("not a dict", "record 1: expected a JSON object, got str"),
        ({"input": "x", "output": "y"}, "record 1: missing field 'instruction'"),
        ({"instruction": "x", "output": 3}, "record 1: field 'output' must be a string, got int"),
        ({"instruction": "x", "input": ["a"], "output": "y"}, "record 1: field 'input' must be a string"),
        ({"instruction": "x", "output": "  "}, "record 1: field 'output' is empty"),
    ]
    for bad, message in cases:
        with pytest.raises(ValueError, match=message):
            check_records([RECORDS[0], bad], "data.json")
    kept, dropped = check_records([RECORDS[0]] + [bad for bad, _ in cases], "data.json", skip_invalid=True)
    assert kept == [RECORDS[0]] and sum(dropped.values()) == 5
    assert dropped["empty_output"] == 1 and dropped["not_an_object"] == 1
    assert check_records([RECORDS[3]])[0][0]["input"] == ""  # input is optional


def test_record_sources(tmp_path):
    as_list = tmp_path / "r.json"
    as_list.write_text(json.dumps(RECORDS))
    as_lines = tmp_path / "r.jsonl"
    as_lines.write_text("\n".join(json.dumps(r) for r in RECORDS) + "\n")
    saved = tmp_path / "saved"
    Dataset.from_list([{"input": "", **r} for r in RECORDS]).save_to_disk(str(saved))
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "train.jsonl").write_text(as_lines.read_text())
    expected = check_records(RECORDS)[0]
    for source in (as_list, as_lines, saved, folder):
        assert load_records(source)[0] == expected, source
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(RECORDS[0]) + "\n{oops\n")
    with pytest.raises(ValueError, match="line 2 is not valid JSON"):
        load_records(broken)


def test_mixture_reproducible_and_complete():
    a = [{"instruction": f"a{i}", "input": "", "output": "x"} for i in range(30)]
    b = [{"instruction": f"b{i}", "input": "", "output": "y"} for i in range(10)]
    mixed = mix_records([a, b], [3, 1], seed=1)
    assert mixed == mix_records([a, b], [3, 1], seed=1)
    assert mixed != mix_records([a, b], [3, 1], seed=2)
    assert sorted(r["instruction"] for r in mixed) == sorted(r["instruction"] for r in a + b)
    first_half = mixed[:20]
    assert sum(r["instruction"].startswith("a") for r in first_half) > 10  # drawn about 3:1 while both last
    with pytest.raises(ValueError, match="--mixture_ratios"):
        mix_records([a, b], [1], seed=0)


def test_tokenizer_without_eos_is_an_error():
    tok = byte_bpe()
    no_eos = type(tok)(tokenizer_object=tok.backend_tokenizer, pad_token="<|pad|>")
    with pytest.raises(ValueError, match="no eos_token"):
        SFTExampleEncoder(no_eos, ALPACA, 256)


def test_build_dataset_counts():
    ds, stats = build_sft_dataset(RECORDS, SFTExampleEncoder(byte_bpe(), ALPACA, 512))
    assert stats["records"] == stats["examples"] == len(ds) == len(RECORDS)
    assert stats["response_tokens"] == sum(sum(t != IGNORE_INDEX for t in lab) for lab in ds["labels"])


def test_alpaca_strings_live_in_data_and_data_never_imports_evaluation():
    """issue 22: data/prompt_templates.py imported the Alpaca strings from evaluation/ (a data -> evaluation edge)."""
    import subprocess
    import sys

    from hf_llmsys.data import alpaca_prompts
    from hf_llmsys.evaluation import alpaca

    assert alpaca.PROMPT_WITH_INPUT is alpaca_prompts.PROMPT_WITH_INPUT
    assert alpaca.PROMPT_NO_INPUT is alpaca_prompts.PROMPT_NO_INPUT
    code = (
        "import sys, hf_llmsys.data.prompt_templates, hf_llmsys.data.sft_labels; "
        "print(sorted(m for m in sys.modules if m.startswith('hf_llmsys.evaluation')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
