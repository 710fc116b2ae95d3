"""The SFT example is the template's text tokenized at once, on four tokenizer families (issue 20 section 1).

Families: byte-level BPE (the real GPT-2), LLaMA-style SentencePiece with the dummy prefix "▁" (the real
Mistral-7B v0.1 tokenizer from PyPI, `scripts/fetch_sentencepiece_tokenizer.py`; skipped when not fetched), T5's
Unigram (transformers' T5Tokenizer rules over a local vocabulary, see sft_fixtures) and GPT-2 with
``add_prefix_space=True``. For each: input_ids are BOS + tokenize(prompt + response) + EOS, the text decodes back
byte for byte (where the tokenizer is lossless), the supervised tokens are the response + EOS in context (plus the
prompt characters a token straddling the seam covers), and generation starts from exactly the training prefix.
"""

from __future__ import annotations

import pytest
from sft_fixtures import RECORDS, SPM_FETCH, gpt2, mistral_sentencepiece, t5_unigram

from hf_llmsys.data.prompt_templates import ALPACA, SHORT
from hf_llmsys.data.sft_labels import IGNORE_INDEX, SFTExampleEncoder, first_token_after

SEAM_RECORDS = RECORDS + [
    {"instruction": "Capital of France?", "input": "", "output": "Paris"},
    {"instruction": "How many legs has a cat?", "input": "", "output": "4 legs."},  # digit first: lone "▁" risk
    {"instruction": "Translate to Chinese.", "input": "news", "output": "新闻报道"},  # CJK first
    {"instruction": "Quote it.", "input": "", "output": '"Hello," she said.'},  # ':"' merges in GPT-2
    {"instruction": "Indent it.", "input": "", "output": "  two leading spaces"},
]


def family(name: str, tmp_path):
    if name == "t5_unigram":
        return t5_unigram()
    if name == "sentencepiece_llama":
        tok = mistral_sentencepiece()
        if tok is None:
            pytest.skip(f"the Mistral SentencePiece tokenizer is not fetched: run {SPM_FETCH}")
        return tok
    tok = gpt2(tmp_path / name, **({"add_prefix_space": True} if name == "gpt2_add_prefix_space" else {}))
    if tok is None:
        pytest.skip("GPT-2 tokenizer files absent from the shared data folder (set LLMSYS_DATA_DIR)")
    return tok


FAMILIES = ["gpt2_byte_bpe", "sentencepiece_llama", "t5_unigram", "gpt2_add_prefix_space"]


def supervised_at(labels: list[int]) -> int:
    return next(i for i, t in enumerate(labels) if t != IGNORE_INDEX)


def view(tokenizer, text: str) -> str:
    """The text as the tokenizer sees it: T5's Unigram splits on whitespace (newlines and runs of spaces become
    one space between words), every other family keeps it byte for byte."""
    return " ".join(text.split()) if "T5" in type(tokenizer).__name__ else text


def lossless(tokenizer, text: str) -> bool:
    """Whether `tokenizer` gives `view(text)` back (no unknown characters; T5 has no byte fallback)."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer.decode(ids).lstrip(" ") == view(tokenizer, text).lstrip(" ")


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("template", [ALPACA, SHORT], ids=lambda t: t.name)
def test_whole_text_tokenized_once_and_supervised_from_the_seam(name, template, tmp_path):
    tok = family(name, tmp_path)
    encoder = SFTExampleEncoder(tok, template, max_length=1024)
    assert encoder.boundary_rule == "offsets"
    bos = [tok.bos_token_id] if name == "sentencepiece_llama" else []  # only the LLaMA family adds a BOS
    assert encoder.lead == bos
    eos = tok.eos_token
    checked = 0
    for record in SEAM_RECORDS:
        prompt, response = template.split(record)
        text = prompt + response
        example, events = encoder.encode(record)
        assert events == []
        ids, labels = example["input_ids"], example["labels"]
        # the whole text tokenized at once, BOS in front and the EOS id appended
        assert ids == bos + tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        at = supervised_at(labels)
        assert labels[:at] == [IGNORE_INDEX] * at and labels[at:] == ids[at:]
        # the boundary is the seam's character offset: the first token ending after the seam is supervised
        offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        assert at - len(bos) == first_token_after(offsets, len(prompt))
        # generation starts from exactly the training prefix
        prefix, overhang = encoder.generation_prefix(record)
        assert prefix == ids[:at]
        assert prompt.endswith(overhang)
        if not lossless(tok, text):
            continue
        checked += 1
        body = tok.decode(ids[len(bos) :])  # decode(ids) = BOS + text + EOS (a SentencePiece decode writes "<s> ")
        lead_space = " " if name == "gpt2_add_prefix_space" else ""  # the tokenizer's own prefix space
        assert body == lead_space + view(tok, text) + eos, record
        if bos:
            assert tok.convert_ids_to_tokens(ids[:1]) == [tok.bos_token]
        # the supervised tokens, decoded in context, are the response + EOS (and a straddling token's overhang)
        head = tok.decode(ids[len(bos) : at])
        answer = body[len(head) :]
        if name == "t5_unigram":  # the space between two words is T5's "▁" of the second: compare words
            answer, response = answer.lstrip(" "), response.lstrip()
        assert answer == view(tok, overhang + response) + eos, record
        assert head == lead_space + view(tok, prompt[: len(prompt) - len(overhang)])
    assert checked >= (2 if name == "t5_unigram" else len(SEAM_RECORDS))


def test_sentencepiece_answer_has_no_space_the_text_never_had():
    """Alpaca's "### Response:" + "Paris" in context is ':', 'Par', 'is' -- not the lone '▁Paris' of the old split."""
    tok = mistral_sentencepiece()
    if tok is None:
        pytest.skip(f"the Mistral SentencePiece tokenizer is not fetched: run {SPM_FETCH}")
    encoder = SFTExampleEncoder(tok, ALPACA, 512)
    for output, first in (("Paris", ["Par", "is"]), ("4 legs.", ["4"]), ("新闻报道", ["新"])):
        example, _ = encoder.encode({"instruction": "Answer.", "input": "", "output": output})
        at = supervised_at(example["labels"])
        tokens = tok.convert_ids_to_tokens(example["input_ids"])
        assert tokens[at - 1] == ":" and tokens[at : at + len(first)] == first, tokens[at - 2 :]
        alone = tok.convert_ids_to_tokens(tok(output, add_special_tokens=False)["input_ids"])
        assert alone[0].startswith("▁")  # what tokenizing the response on its own gave


def test_straddling_token_is_supervised_and_generation_strips_its_overhang(tmp_path):
    tok = family("gpt2_byte_bpe", tmp_path)
    record = {"instruction": "Quote it.", "input": "", "output": '"Hello," she said.'}
    encoder = SFTExampleEncoder(tok, ALPACA, 256)
    example, _ = encoder.encode(record)
    at = supervised_at(example["labels"])
    assert tok.convert_ids_to_tokens(example["input_ids"][at : at + 1]) == [':"']  # straddles the seam
    prefix, overhang = encoder.generation_prefix(record)
    assert overhang == ":" and prefix == example["input_ids"][:at]
    # without the answer only the prompt text is known: tokenized alone, it ends with the ':' token
    alone, none = encoder.generation_prefix({**record, "output": ""})
    assert none == "" and tok.decode(alone).endswith("### Response:")


class _SlowGPT2:
    """GPT-2 seen as a tokenizer without offsets (is_fast False): the common-prefix fallback is used."""

    def __init__(self, tok):
        self._tok = tok
        self.is_fast = False

    def __getattr__(self, name):
        return getattr(self._tok, name)

    def __call__(self, *args, **kwargs):
        kwargs.pop("return_offsets_mapping", None)
        return self._tok(*args, **kwargs)


def test_tokenizer_without_offsets_falls_back_to_the_common_prefix_rule(tmp_path):
    tok = family("gpt2_byte_bpe", tmp_path)
    slow = _SlowGPT2(tok)
    fast_encoder, slow_encoder = SFTExampleEncoder(tok, ALPACA, 512), SFTExampleEncoder(slow, ALPACA, 512)
    assert slow_encoder.boundary_rule == "common_prefix"
    # on GPT-2 the common-prefix rule also supervises the straddling token: the same examples
    assert slow_encoder.encode_batch(SEAM_RECORDS)[0] == fast_encoder.encode_batch(SEAM_RECORDS)[0]


def test_a_real_slow_tokenizer_gets_the_fallback():
    from transformers import ByT5Tokenizer

    tok = ByT5Tokenizer()
    encoder = SFTExampleEncoder(tok, SHORT, 256)
    assert not tok.is_fast and encoder.boundary_rule == "common_prefix"
    record = SEAM_RECORDS[-3]
    example, _ = encoder.encode(record)
    prompt, response = SHORT.split(record)
    at = supervised_at(example["labels"])
    assert tok.decode(example["input_ids"]) == prompt + response + tok.eos_token
    assert tok.decode(example["input_ids"][at:]) == response + tok.eos_token


def test_generation_is_given_the_training_prefix_and_answers_lose_the_overhang(tmp_path):
    """generate_responses hands model.generate exactly the training prefix; a first token straddling the seam
    (':"') is generated whole and its prompt part (':') is not part of the answer."""
    import torch
    from sft_fixtures import base_model_config
    from transformers import AutoModelForCausalLM

    from hf_llmsys.evaluation.greedy_answers import generate_responses

    tok = family("gpt2_byte_bpe", tmp_path)
    record = {"instruction": "Quote it.", "input": "", "output": '"Hello," she said.'}
    encoder = SFTExampleEncoder(tok, ALPACA, 256)
    example, _ = encoder.encode(record)
    at = supervised_at(example["labels"])
    model = AutoModelForCausalLM.from_config(base_model_config("llmsys_llama", tok, hidden=16, max_positions=256))
    given = []

    def fake_generate(input_ids, attention_mask, **kwargs):  # "generates" the training answer
        given.append(input_ids[0][attention_mask[0].bool()].tolist())
        return torch.cat([input_ids, torch.tensor([example["input_ids"][at:]])], dim=1)

    model.generate = fake_generate
    (answer,) = generate_responses(model, tok, ALPACA, [record], max_new_tokens=8, encoder=encoder)
    assert given == [example["input_ids"][:at]]
    assert answer == record["output"]


def test_conversation_masks_without_offsets_fall_back_to_the_common_prefix():
    from test_sft_conversations import chatml_tokenizer, records

    from hf_llmsys.data.conversation_labels import ConversationEncoder, ConversationTemplate

    tok = chatml_tokenizer()
    slow = _SlowGPT2(tok)
    fast = ConversationEncoder(tok, ConversationTemplate(tok), 512)
    fallback = ConversationEncoder(slow, ConversationTemplate(slow), 512)
    assert fallback.boundary_rule == "common_prefix"
    assert fallback.encode_batch(records())[0] == fast.encode_batch(records())[0]
