"""Instruction tuning through real chat templates equals TRL 1.16 (issue 46: one chat path, the mask comparison).

Four published templates (ChatML / Qwen2.5, Llama-3, Phi-3, Mistral-Instruct: `chat_template_fixtures.py`) on two
local tokenizer bases (GPT-2 byte-level BPE, Mistral SentencePiece). Alpaca records under ``--template chat`` are
one-turn conversations labelled by the conversation path: ids and labels identical to TRL's prompt-completion
conversational path. Multi-turn conversations (``tests/fixtures/conversations/multi_turn.jsonl``) against TRL's
``assistant_only_loss`` through the mask comparison (trl_masks.py) (TRL's own marked copies of the first three templates,
ours of Mistral's): ids identical, labels differing only in whitespace tokens at span edges (ChatML: TRL's marked
copy puts the generation prompt's ``"\\n"`` inside the reply), nothing else. Also: Phi-3's closing EOS with several
assistant turns, and a template with no end-of-turn text (EOS appended, said in a log line).
"""

from __future__ import annotations

import copy
import logging

import pytest
from chat_template_fixtures import BASES, FAMILIES, base_tokenizer, chat_tokenizer
from sft_fixtures import RECORDS, byte_bpe, one_thread  # noqa: F401
from test_sft_conversations import CONVERSATIONS, runs

from hf_llmsys.data.conversation_labels import ConversationEncoder, ConversationTemplate, assistant_spans
from hf_llmsys.data.conversation_records import check_conversations
from hf_llmsys.data.prompt_templates import ChatPromptTemplate, alpaca_messages, load_template
from hf_llmsys.data.sft_labels import IGNORE_INDEX

CASES = [(base, family) for base in BASES for family in FAMILIES]


@pytest.fixture(scope="module")
def bases():
    return {}


def family_tokenizer(bases, tmp_path_factory, base: str, family: str):
    if base not in bases:
        bases[base] = base_tokenizer(base, tmp_path_factory.mktemp(base))
    return chat_tokenizer(family, bases[base])


def _masks():
    pytest.importorskip("trl")
    import trl_masks

    return trl_masks


@pytest.mark.parametrize(("base", "family"), CASES)
def test_alpaca_chat_equals_trl_prompt_completion(base, family, bases, tmp_path_factory):
    """Ids and labels identical to TRL's prompt-completion conversational path; the reply + the template's own
    end-of-turn text supervised, no EOS appended, generation from the exact generation prompt."""
    masks = _masks()
    tok = family_tokenizer(bases, tmp_path_factory, base, family)
    template = load_template("chat", tok)
    assert isinstance(template, ChatPromptTemplate) and not template.appends_eos
    ours = masks.our_examples(RECORDS, tok, template, 512)
    trl = masks.trl_examples(RECORDS, tok, template, 512)
    encoder = ConversationEncoder(tok, template, 512)
    end_of_turn = FAMILIES[family]["end_of_turn"]
    shifted = 0
    for record, example, reference in zip(RECORDS, ours, trl, strict=True):
        prompt = tok.apply_chat_template(alpaca_messages(record)[:1], tokenize=False, add_generation_prompt=True)
        prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        explained = example != reference
        if explained:
            # The one explained case: TRL's prompt tokenized alone is not a prefix of the whole (its "Mismatch"
            # warning: GPT-2's regex makes Llama-3's "\n\n" one token at the end of the prompt, two before a word),
            # so TRL supervises the generation prompt's trailing whitespace tokens; same ids, nothing else differs.
            assert example["input_ids"][: len(prompt_ids)] != prompt_ids
            assert masks._mask_shift(example, reference, tok), (example, reference)
            shifted += 1
        (supervised,) = runs(example["input_ids"], example["labels"])
        text = tok.decode(supervised)
        # the reply, then exactly what the template writes after it (ChatML: "<|im_end|>\n", Phi-3 ends with EOS)
        assert text.endswith(template.end_of_turn) and template.end_of_turn.startswith(end_of_turn)
        ends_with_eos = family in ("phi3", "mistral_instruct")  # Phi-3 closes with the EOS; Mistral's turn end is it
        assert record["output"].strip() in text and text.count(tok.eos_token) == ends_with_eos
        prefix, _ = encoder.generation_prefix(record)
        shown, first_token = tok.decode(prefix), tok.decode(example["input_ids"][len(prefix) : len(prefix) + 1])
        if shown == prompt:  # generation starts from exactly the generation prompt's text
            assert prefix == prompt_ids or explained  # (and its ids, but where GPT-2 splits Llama-3's "\n\n")
        else:  # the reply's first token straddles the prompt's end (a leading "\n" after ChatML's, ":)" after "]")
            assert prompt.startswith(shown) and first_token.startswith(prompt[len(shown) :]), (shown, first_token)
        assert example["input_ids"][: len(prefix)] == prefix and example["labels"][len(prefix)] != IGNORE_INDEX
    assert shifted == (len(RECORDS) if (base, family) == ("gpt2", "llama3") else 0)


def test_conversations_equal_trl_assistant_only_loss_up_to_whitespace_at_span_edges(bases, tmp_path_factory):
    """The conversation comparison (trl_masks.py) on the multi-turn fixture (messages and ShareGPT, up to three
    assistant turns) and the ChatML test conversations, every family on every base: ids identical, labels identical
    or differing only in whitespace tokens at span edges, nothing unexplained."""
    masks = _masks()
    conversations = masks.fixture_conversations() + check_conversations(CONVERSATIONS)[0]
    assert sum(sum(m["role"] == "assistant" for m in c["messages"]) >= 2 for c in conversations) >= 10
    for base, family in CASES:
        tok = family_tokenizer(bases, tmp_path_factory, base, family)
        result = masks.compare_conversations(conversations, tok, family)
        counts = result["counts"]
        assert counts["unexplained"] == 0, (base, family, result)
        assert result["conversations"] + result["refused_by_template"] == len(conversations)
        if family == "chatml":  # TRL's marked Qwen2.5 copy supervises the generation prompt's "\n" before a reply
            assert counts["whitespace_edge"] > 0 and set(result["examples"]) <= {
                "whitespace_only_trl", "whitespace_edge_records"
            }, result  # fmt: skip
            assert all(text.strip("'\\n") == "" for text in result["examples"]["whitespace_only_trl"])
        else:
            assert counts["identical"] == result["conversations"], (base, family, result)
        # Mistral's template refuses a system turn (raise_exception), on TRL's side as on ours
        assert (result["refused_by_template"] > 0) == (family == "mistral_instruct")


def test_every_assistant_turn_of_a_long_conversation_is_supervised_once(bases, tmp_path_factory):
    """Three assistant turns: three supervised runs, each the reply and the template's end-of-turn text, in order."""
    fixture = _masks().fixture_conversations()
    conversation = next(c for c in fixture if sum(m["role"] == "assistant" for m in c["messages"]) == 3)
    replies = [m["content"] for m in conversation["messages"] if m["role"] == "assistant"]
    for base, family in CASES:
        tok = family_tokenizer(bases, tmp_path_factory, base, family)
        template = ConversationTemplate(tok)
        no_system = {"messages": [m for m in conversation["messages"] if m["role"] != "system"]}
        record = no_system if family == "mistral_instruct" else conversation  # Mistral's has no system role
        example, _ = ConversationEncoder(tok, template, 4096).encode(record)
        texts = [tok.decode(r) for r in runs(example["input_ids"], example["labels"])]
        assert len(texts) == 3, (base, family, texts)
        for text, reply in zip(texts, replies, strict=True):
            assert reply.strip() in text and FAMILIES[family]["end_of_turn"] in text, (base, family, text)


def test_whitespace_edge_classification_is_checked_not_assumed():
    masks = _masks()
    tok = chat_tokenizer("chatml", byte_bpe())
    ours, _ = ConversationEncoder(tok, ConversationTemplate(tok), 512).encode(check_conversations(CONVERSATIONS)[0][0])
    labels = ours["labels"]
    first = next(i for i, t in enumerate(labels) if t != IGNORE_INDEX)
    newline_before = {**ours, "labels": [*labels[: first - 1], ours["input_ids"][first - 1], *labels[first:]]}
    assert tok.decode(ours["input_ids"][first - 1 : first]) == "\n"  # the generation prompt's newline
    assert masks.whitespace_edge(ours, newline_before, tok) and masks.whitespace_edge(newline_before, ours, tok)
    word_dropped = {**ours, "labels": [*labels[:first], IGNORE_INDEX, *labels[first + 1 :]]}
    assert not masks.whitespace_edge(ours, word_dropped, tok)  # a reply token: not whitespace
    other_ids = {**ours, "input_ids": [*ours["input_ids"][:-1], 0]}
    assert not masks.whitespace_edge(ours, other_ids, tok)
    lone = next(i for i in range(1, first - 1) if tok.decode(ours["input_ids"][i : i + 1]) == "\n")
    far = {**ours, "labels": [*labels[:lone], ours["input_ids"][lone], *labels[lone + 1 :]]}
    assert not masks.whitespace_edge(ours, far, tok)  # whitespace, but not at a span edge


def phi3_like(tok):
    from chat_template_fixtures import template_text

    tok = copy.deepcopy(tok)
    tok.add_tokens(FAMILIES["phi3"]["specials"], special_tokens=True)
    tok.split_special_tokens = False
    tok.eos_token = "<|endoftext|>"
    tok.chat_template = template_text("phi3")
    return tok


def test_template_writing_eos_outside_a_generation_prompt_handles_several_assistant_turns():
    """Phi-3 writes eos_token after the last turn when add_generation_prompt is false: a middle reply's span ends
    before it (not a prefix of the whole text otherwise), the final reply's keeps it."""
    tok = phi3_like(byte_bpe())
    messages = check_conversations(CONVERSATIONS)[0][0]["messages"]  # system, user, assistant, user, assistant
    text, spans = assistant_spans(tok, messages)
    assert [text[s:e] for s, e in spans] == ["Paris<|end|>\n", "Rome, of course.<|end|>\n<|endoftext|>"]
    ending_with_user = [*messages, {"role": "user", "content": "Thanks."}]
    text, spans = assistant_spans(tok, ending_with_user)
    assert [text[s:e] for s, e in spans] == ["Paris<|end|>\n", "Rome, of course.<|end|>\n"]
    assert text.endswith("<|user|>\nThanks.<|end|>\n<|endoftext|>")  # the closing EOS is not supervised here
    example, _ = ConversationEncoder(tok, ConversationTemplate(tok), 512).encode({"messages": ending_with_user})
    assert [tok.decode(r) for r in runs(example["input_ids"], example["labels"])] == [
        "Paris<|end|>\n",
        "Rome, of course.<|end|>\n",
    ]


def test_template_without_end_of_turn_text_appends_the_eos_and_says_so(caplog):
    tok = copy.deepcopy(byte_bpe())
    tok.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    with caplog.at_level(logging.WARNING, logger="hf_llmsys"):
        template = load_template("chat", tok)
    assert template.end_of_turn == "\n" and template.appends_eos
    assert "writes no end-of-turn text" in caplog.text and tok.eos_token in caplog.text
    example, _ = ConversationEncoder(tok, template, 256).encode(RECORDS[2])
    (supervised,) = runs(example["input_ids"], example["labels"])
    rendered = tok.apply_chat_template(alpaca_messages(RECORDS[2]), tokenize=False)
    assert rendered == "user: Add the numbers.\n\n2 and 3\nassistant: 5\n"
    assert example["input_ids"] == tok(rendered, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert supervised[-1] == tok.eos_token_id and tok.decode(supervised[:-1]).endswith("5\n")  # (" 5": one token)
    # a template that writes its end of turn appends nothing
    assert not ChatPromptTemplate(phi3_like(byte_bpe())).appends_eos


def test_sft_alpaca_chat_logs_the_marked_example_and_saves_the_end_of_turn_stop(tmp_path, caplog):
    """``llmsys sft --template chat`` on Alpaca records (ChatML, EOS <|endoftext|> != <|im_end|>): the first
    training example is logged with its supervised text in [[...]], the saved generation config stops at both."""
    import json

    from sft_fixtures import save_base_model, write_records

    from hf_llmsys.training import sft

    tok = chat_tokenizer("chatml", byte_bpe())
    base = save_base_model(tmp_path / "base", "llmsys_llama", tok, hidden=32, max_positions=256)
    data = write_records(tmp_path / "records.json", RECORDS * 2)
    quiet = {"disable_tqdm": True, "report_to": "none", "save_steps": 10_000, "max_steps": 1, "max_length": 256}
    with caplog.at_level(logging.INFO, logger="hf_llmsys"):
        results = sft(base, str(data), tmp_path / "out", template="chat", num_generation_examples=1,
                      generation_max_new_tokens=2, **quiet)  # fmt: skip
    assert results["template"] == "chat" and results["global_step"] == 1
    (line,) = [r.getMessage() for r in caplog.records if "first training example" in r.getMessage()]
    # the prompt unmarked through the generation prompt's newline, then the reply and end of turn marked
    assert "<|im_start|>assistant\\n[[" in line and "<|im_end|>\\n]]" in line and "[[<|im_start|>" not in line
    eos, im_end = tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    saved = json.loads((tmp_path / "out" / "generation_config.json").read_text())
    assert saved["eos_token_id"] == [eos, im_end]
    assert json.loads((tmp_path / "out" / "prompt_template.json").read_text()) == {"type": "chat", "name": "chat"}
    assert isinstance(load_template(tmp_path / "out", tok), ChatPromptTemplate)


def test_sft_chat_template_on_an_encoder_decoder_is_refused_before_writing(tmp_path):
    from sft_fixtures import save_base_model, write_records

    from hf_llmsys.training import sft

    tok = chat_tokenizer("chatml", byte_bpe())
    base = save_base_model(tmp_path / "t5", "llmsys_t5", tok, hidden=32)
    data = write_records(tmp_path / "records.json", RECORDS)
    with pytest.raises(ValueError, match="--template chat: llmsys_t5 is an encoder-decoder"):
        sft(base, str(data), tmp_path / "out", template="chat", max_steps=1, report_to="none")
    assert not (tmp_path / "out").exists()
