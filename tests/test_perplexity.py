"""Sliding-window corpus perplexity: brute-force parity, exact toy models, the classic bugs, wrappers, bad input."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from torch import nn
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    T5Config,
    T5ForConditionalGeneration,
)

from hf_llmsys import LlmsysLlamaConfig, LlmsysLlamaForCausalLM
from hf_llmsys.data.tokenizer import train_bpe_tokenizer
from hf_llmsys.evaluation import corpus_perplexity, perplexity_by_context_length, seq2seq_perplexity
from hf_llmsys.evaluation.perplexity import plan_windows

CORPUS = [
    "The quick brown fox jumps over the lazy dog while the cat sleeps in the warm sun.\n",
    "A hacker is a person who enjoys exploring the details of programmable systems.\n",
    "Money, n. A blessing that is of no advantage to us excepting when we part with it.\n",
]
LONG_TEXT = CORPUS[0] + CORPUS[1]  # ~40 tokens
SHORT_TEXT = "Money is a blessing."  # fewer tokens than most max_lengths below


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe_tokenizer(CORPUS * 10, vocab_size=300)


def _tiny_llama(vocab_size: int, max_positions: int = 64) -> LlmsysLlamaForCausalLM:
    torch.manual_seed(0)
    config = LlmsysLlamaConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
    )  # fmt: skip
    return LlmsysLlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def model(tokenizer):
    return _tiny_llama(len(tokenizer))


def _word_tokenizer(n_words: int = 9) -> PreTrainedTokenizerFast:
    """Word-level tokenizer: <s>=0, <pad>=1, <unk>=2, w1..wn = 3..n+2."""
    vocab = {"<s>": 0, "<pad>": 1, "<unk>": 2} | {f"w{i}": i + 2 for i in range(1, n_words + 1)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", pad_token="<pad>", unk_token="<unk>")


class UniformLM(nn.Module):
    """Zero logits everywhere: every token has probability 1 / V."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.vocab_size = vocab_size

    def forward(self, input_ids, attention_mask=None):
        return torch.zeros(*input_ids.shape, self.vocab_size)  # (B, S, V)


class OracleLM(nn.Module):
    """Puts (numerically) all mass on a fixed successor of the current token: perfect on cyclic text."""

    def __init__(self, successor: torch.Tensor):
        super().__init__()
        self.register_buffer("successor", successor)

    def forward(self, input_ids, attention_mask=None):
        logits = 100.0 * nn.functional.one_hot(self.successor[input_ids], len(self.successor))  # (B, S, V)
        return (logits.float(),)


class ContextLM(nn.Module):
    """Reveals how many tokens it saw: at window position j, NLL of any token != 0 is ln((j + 2)(V - 1))."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.vocab_size = vocab_size

    def forward(self, input_ids, attention_mask=None):
        batch, seq = input_ids.shape
        logits = torch.zeros(batch, seq, self.vocab_size)
        logits[..., 0] = torch.log((torch.arange(seq) + 1.0) * (self.vocab_size - 1))
        return logits

    def contexts(self, token_nlls: torch.Tensor) -> list[int]:
        """Tokens visible when each scored token was predicted (j + 1)."""
        return [round(math.exp(x) / (self.vocab_size - 1)) - 1 for x in token_nlls.double().tolist()]


def _ids(tokenizer, text: str) -> list[int]:
    return [tokenizer.bos_token_id] + tokenizer(text, add_special_tokens=False)["input_ids"]


def _expected_context(t: int, max_length: int, stride: int, n_ids: int) -> int:
    """Tokens visible to target t (>= 1) of n_ids: its input position t - 1 is scored by the first window with
    begin + L > t - 1 (begin = k * stride), except in the final window, which ends at position n_ids - 2 and holds
    the max_length positions before it (lm-eval's end-aligned rolling window)."""
    k = max(0, math.ceil((t - max_length) / stride))
    last = max(0, math.ceil((n_ids - 1 - max_length) / stride))  # index of the final window
    return t - (n_ids - 1 - max_length) if 0 < k == last else t - k * stride


def brute_force_nlls(model, ids: list[int], max_length: int, stride: int) -> torch.Tensor:
    """Reference: one forward per token t on exactly the context its window gives it, scoring token t."""
    out = []
    with torch.inference_mode():
        for t in range(1, len(ids)):
            context = ids[t - _expected_context(t, max_length, stride, len(ids)) : t]
            logits = model(input_ids=torch.tensor([context])).logits[0, -1].float()
            out.append(-torch.log_softmax(logits, -1)[ids[t]])
    return torch.stack(out)


# ------------------------------------------------------------------------------------------------ parity


@pytest.mark.parametrize("max_length, stride", [(4, 1), (4, 2), (4, 4), (8, 3), (8, 8), (16, 5), (64, 32)])
def test_matches_brute_force(model, tokenizer, max_length, stride):
    texts = [LONG_TEXT, SHORT_TEXT]
    result = corpus_perplexity(
        model, tokenizer, texts, max_length=max_length, stride=stride, batch_size=3, return_token_nlls=True
    )
    expected = [brute_force_nlls(model, _ids(tokenizer, t), max_length, stride) for t in texts]
    for got, want in zip(result.token_nlls, expected, strict=True):
        assert got.shape == want.shape  # every token but the bos scored exactly once
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert result.tokens == sum(len(w) for w in expected)
    total = float(torch.cat(expected).double().sum())
    assert result.nll == pytest.approx(total, rel=1e-5)
    assert result.ppl == pytest.approx(math.exp(total / result.tokens), rel=1e-5)


def test_independent_of_batch_size(model, tokenizer):
    texts = [LONG_TEXT, SHORT_TEXT, CORPUS[2]]
    results = [corpus_perplexity(model, tokenizer, texts, max_length=8, stride=3, batch_size=b) for b in (1, 2, 64)]
    for other in results[1:]:
        assert other.tokens == results[0].tokens
        assert other.nll == pytest.approx(results[0].nll, rel=1e-6)


# ------------------------------------------------------------------------------------------------ exact toys


def test_uniform_model_gives_vocab_size(tokenizer):
    vocab = len(tokenizer)
    result = corpus_perplexity(UniformLM(vocab), tokenizer, [LONG_TEXT, SHORT_TEXT], max_length=8, stride=3)
    assert result.ppl == pytest.approx(vocab, rel=1e-6)


def test_oracle_model_gives_one():
    tok = _word_tokenizer(9)
    successor = torch.tensor([3, 0, 0] + [4, 5, 6, 7, 8, 9, 10, 11, 3])  # <s> -> w1, w_i -> w_{i+1}, w9 -> w1
    text = " ".join(f"w{i % 9 + 1}" for i in range(40))
    result = corpus_perplexity(OracleLM(successor), tok, text, max_length=8, stride=4)
    assert result.tokens == 40
    assert result.ppl == 1.0


def test_disjoint_windows_context_restarts_and_final_window_is_end_aligned():
    tok = _word_tokenizer(9)
    lm = ContextLM(len(tok))
    text = " ".join(f"w{i % 9 + 1}" for i in range(20))  # 21 ids with bos, 20 scored
    result = corpus_perplexity(lm, tok, text, max_length=6, stride=6, return_token_nlls=True)
    # three full disjoint windows; the final partial one (tokens 19, 20) gets 4 tokens of left context, not 0
    assert lm.contexts(result.token_nlls[0]) == [(t - 1) % 6 + 1 for t in range(1, 19)] + [5, 6]
    assert [(w.begin, w.end, w.score_from) for w in plan_windows(21, 6, 6)] == [
        (0, 6, 0),
        (6, 12, 6),
        (12, 18, 12),
        (14, 20, 18),
    ]


@pytest.mark.parametrize("max_length, stride", [(6, 1), (6, 2), (6, 5), (5, 3), (6, 6), (7, 4)])
def test_each_token_gets_its_window_context(max_length, stride):
    tok = _word_tokenizer(9)
    lm = ContextLM(len(tok))
    text = " ".join(f"w{i % 9 + 1}" for i in range(23))
    result = corpus_perplexity(lm, tok, text, max_length=max_length, stride=stride, return_token_nlls=True)
    contexts = lm.contexts(result.token_nlls[0])
    assert contexts == [_expected_context(t, max_length, stride, 24) for t in range(1, 24)]
    # (a) the first window scores all of its max_length positions, with contexts 1..max_length
    assert contexts[:max_length] == list(range(1, max_length + 1))
    # after the first window every token sees at least max_length - stride + 1 tokens
    assert min(contexts[max_length:]) >= max_length - stride + 1
    # the final window is end-aligned: the last token sees a full window
    assert contexts[-1] == max_length


def test_corpus_ppl_is_per_token_not_mean_of_windows():
    tok = _word_tokenizer(9)
    lm = ContextLM(len(tok))
    text = " ".join(f"w{i % 9 + 1}" for i in range(17))  # windows score 8, 4, 4, 1 tokens
    result = corpus_perplexity(lm, tok, text, max_length=8, stride=4, return_token_nlls=True)
    nlls = result.token_nlls[0].double()
    assert result.ppl == pytest.approx(math.exp(float(nlls.mean())), rel=1e-9)
    sizes = [w.end - w.score_from for w in plan_windows(18, 8, 4)]
    assert sizes == [8, 4, 4, 1]
    window_ppls = [math.exp(float(chunk.mean())) for chunk in nlls.split(sizes)]
    assert abs(sum(window_ppls) / len(window_ppls) - result.ppl) / result.ppl > 0.01


# ------------------------------------------------------------------------------------------------ result fields


def test_word_byte_ppl_and_token_nlls(model, tokenizer):
    texts = [LONG_TEXT, "naïve café — ünïcode bytes"]
    result = corpus_perplexity(model, tokenizer, texts, max_length=16, stride=8, return_token_nlls=True)
    words = len(LONG_TEXT.split()) + 1 + 5  # the trailing newline leaves one empty field (lm-eval's count)
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    assert (result.words, result.bytes) == (words, nbytes)
    assert result.word_ppl == pytest.approx(math.exp(result.nll / words))
    assert result.byte_ppl == pytest.approx(math.exp(result.nll / nbytes))
    assert result.bits_per_byte == pytest.approx(result.nll / nbytes / math.log(2))
    assert len(result.token_nlls) == 2
    assert float(sum(t.double().sum() for t in result.token_nlls)) == pytest.approx(result.nll, rel=1e-9)
    assert set(result.to_dict()) == {"tokens", "ppl", "word_ppl", "byte_ppl", "bits_per_byte", "nll", "words", "bytes"}
    assert corpus_perplexity(model, tokenizer, texts, max_length=16).token_nlls is None


def test_no_start_token_skips_first_token(model, tokenizer):
    with_bos = corpus_perplexity(model, tokenizer, LONG_TEXT, max_length=16)
    without = corpus_perplexity(model, tokenizer, LONG_TEXT, max_length=16, add_start_token=False)
    assert without.tokens == with_bos.tokens - 1


def test_tokenizer_without_pad_token(model, tokenizer):
    reference = corpus_perplexity(model, tokenizer, [LONG_TEXT, SHORT_TEXT], max_length=8)
    no_pad = copy.deepcopy(tokenizer)
    no_pad.pad_token = None
    result = corpus_perplexity(model, no_pad, [LONG_TEXT, SHORT_TEXT], max_length=8)
    assert result.nll == pytest.approx(reference.nll, rel=1e-6)


def test_bf16_autocast_close_and_training_flag_restored(model, tokenizer):
    model.train()
    fp32 = corpus_perplexity(model, tokenizer, LONG_TEXT, max_length=16)
    assert model.training
    bf16 = corpus_perplexity(model, tokenizer, LONG_TEXT, max_length=16, dtype="bf16")
    assert bf16.ppl == pytest.approx(fp32.ppl, rel=0.05)
    assert next(model.parameters()).dtype == torch.float32  # autocast, not a cast of the model
    model.eval()


def test_default_max_length_from_config(tokenizer):
    lm = _tiny_llama(len(tokenizer), max_positions=16)
    default = corpus_perplexity(lm, tokenizer, LONG_TEXT)
    explicit = corpus_perplexity(lm, tokenizer, LONG_TEXT, max_length=16, stride=8)
    assert default.nll == pytest.approx(explicit.nll, rel=1e-6)


# ------------------------------------------------------------------------------------------------ other models


def test_peft_wrapped_model(tokenizer):
    from peft import LoraConfig, get_peft_model

    base = _tiny_llama(len(tokenizer))
    peft_model = get_peft_model(
        base, LoraConfig(r=4, target_modules=["q_proj", "k_proj", "v_proj"], init_lora_weights=False)
    )
    result = corpus_perplexity(peft_model, tokenizer, [LONG_TEXT, SHORT_TEXT], max_length=8, stride=4)
    merged = copy.deepcopy(peft_model).merge_and_unload()
    reference = corpus_perplexity(merged, tokenizer, [LONG_TEXT, SHORT_TEXT], max_length=8, stride=4)
    plain = corpus_perplexity(_tiny_llama(len(tokenizer)), tokenizer, [LONG_TEXT, SHORT_TEXT], max_length=8, stride=4)
    assert result.nll == pytest.approx(reference.nll, rel=1e-5)
    assert abs(result.nll - plain.nll) > 1e-3  # the adapter really took part


def _tiny_gpt2(vocab_size: int) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=vocab_size, n_positions=32, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0
    )
    return GPT2LMHeadModel(config).eval()


def test_gpt2_matches_brute_force_and_rejects_long_windows(tokenizer):
    gpt2 = _tiny_gpt2(len(tokenizer))
    text = LONG_TEXT * 2
    result = corpus_perplexity(gpt2, tokenizer, text, max_length=32, stride=10, return_token_nlls=True)
    torch.testing.assert_close(
        result.token_nlls[0], brute_force_nlls(gpt2, _ids(tokenizer, text), 32, 10), rtol=1e-5, atol=1e-6
    )
    assert corpus_perplexity(gpt2, tokenizer, text).tokens == result.tokens  # default max_length = n_positions
    with pytest.raises(ValueError, match=r"learned position table \(config\.\w+=32\)"):
        corpus_perplexity(gpt2, tokenizer, text, max_length=64)
    with pytest.raises(ValueError, match="learned position table"):
        perplexity_by_context_length(gpt2, tokenizer, text, [16, 64])


def test_rope_models_warn_beyond_context(tokenizer):
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
    )  # fmt: skip
    hf_llama = LlamaForCausalLM(config).eval()
    result = corpus_perplexity(hf_llama, tokenizer, LONG_TEXT, max_length=8, stride=3, return_token_nlls=True)
    torch.testing.assert_close(
        result.token_nlls[0], brute_force_nlls(hf_llama, _ids(tokenizer, LONG_TEXT), 8, 3), rtol=1e-5, atol=1e-6
    )
    for lm in (hf_llama, _tiny_llama(len(tokenizer), max_positions=16)):
        with pytest.warns(UserWarning, match="exceeds the model's trained context"):
            assert corpus_perplexity(lm, tokenizer, LONG_TEXT, max_length=32).tokens == result.tokens


def test_perplexity_by_context_length(model, tokenizer):
    rows = perplexity_by_context_length(model, tokenizer, LONG_TEXT * 2, [4, 16, 64])
    assert [(r["context_length"], r["stride"]) for r in rows] == [(4, 2), (16, 8), (64, 32)]
    direct = corpus_perplexity(model, tokenizer, LONG_TEXT * 2, max_length=16, stride=8)
    assert rows[1]["ppl"] == pytest.approx(direct.ppl, rel=1e-9)
    assert len({r["tokens"] for r in rows}) == 1


def test_seq2seq_perplexity_t5(tokenizer):
    torch.manual_seed(0)
    config = T5Config(
        vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    t5 = T5ForConditionalGeneration(config).eval()
    sources, targets = [CORPUS[0], SHORT_TEXT, CORPUS[1]], [SHORT_TEXT, CORPUS[2], "Yes."]
    result = seq2seq_perplexity(t5, tokenizer, sources, targets, batch_size=2, return_token_nlls=True)
    total, count = 0.0, 0
    with torch.inference_mode():
        for src, tgt in zip(sources, targets, strict=True):
            labels = tokenizer(tgt, return_tensors="pt")["input_ids"]
            loss = t5(input_ids=tokenizer(src, return_tensors="pt")["input_ids"], labels=labels).loss
            total, count = total + float(loss) * labels.shape[1], count + labels.shape[1]
    assert result.tokens == count
    assert result.nll == pytest.approx(total, rel=1e-5)
    assert [len(t) for t in result.token_nlls] == [len(tokenizer(t)["input_ids"]) for t in targets]
    single = seq2seq_perplexity(t5, tokenizer, sources, targets, batch_size=1)
    assert single.nll == pytest.approx(result.nll, rel=1e-5)
    with pytest.raises(ValueError, match="differ in length"):
        seq2seq_perplexity(t5, tokenizer, sources, targets[:2])


# ------------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "texts, kwargs, match",
    [
        ([], {}, "texts is empty"),
        ([LONG_TEXT, ""], {}, r"texts\[1\] is an empty string"),
        ([LONG_TEXT, "A"], {"add_start_token": False}, "text 1 has 1 token"),
        (LONG_TEXT, {"max_length": 8, "stride": 9}, "stride=9 > max_length=8"),
        (LONG_TEXT, {"max_length": 8, "stride": 0}, "stride must be a positive integer"),
        (LONG_TEXT, {"max_length": 1}, "max_length must be an integer >= 2"),
        (LONG_TEXT, {"max_length": 8, "batch_size": 0}, "batch_size must be a positive integer"),
        (LONG_TEXT, {"max_length": 8, "dtype": "fp8"}, "dtype 'fp8' is unknown"),
    ],
)
def test_bad_inputs(model, tokenizer, texts, kwargs, match):
    with pytest.raises(ValueError, match=match):
        corpus_perplexity(model, tokenizer, texts, **kwargs)


def test_unknown_context_needs_max_length():
    tok = _word_tokenizer(9)
    with pytest.raises(ValueError, match="pass max_length"):
        corpus_perplexity(UniformLM(len(tok)), tok, "w1 w2 w3")


def test_scored_positions_only_lm_head_equals_full_logits(model, tokenizer, monkeypatch):
    """The logits_to_keep fast path (LM head on scored positions only) gives the full-logits result."""
    from hf_llmsys.evaluation import window_batching as module

    texts = ["the quick brown fox jumps over the lazy dog " * 6, "pack my box with five dozen liquor jugs " * 3]
    assert module.accepts_logits_to_keep(model)
    calls = []
    hook = model.register_forward_pre_hook(lambda m, a, k: calls.append("logits_to_keep" in k), with_kwargs=True)
    try:
        fast = corpus_perplexity(model, tokenizer, texts, max_length=16, stride=5, batch_size=3)
        assert calls and all(calls)
        calls.clear()
        monkeypatch.setattr(module, "accepts_logits_to_keep", lambda m: False)
        full = corpus_perplexity(model, tokenizer, texts, max_length=16, stride=5, batch_size=3)
        assert calls and not any(calls)
    finally:
        hook.remove()
    assert fast.tokens == full.tokens
    assert fast.nll == pytest.approx(full.nll, rel=1e-6)


def test_texts_are_encoded_in_batches_as_int64_tensors(tokenizer, model, monkeypatch):
    """Encoding a corpus batch by batch gives every text the ids one call over all texts gives (bos first), as
    int64 tensors, and the same perplexity."""
    from hf_llmsys.evaluation import text_inputs

    texts = [CORPUS[i % len(CORPUS)][: 40 + 7 * i] for i in range(11)]
    whole = corpus_perplexity(model, tokenizer, texts, max_length=32)
    monkeypatch.setattr(text_inputs, "ENCODE_BATCH", 3)  # 11 texts: four tokenizer calls
    seqs = text_inputs.encode_texts(tokenizer, texts, add_start_token=True)
    reference = tokenizer(texts, add_special_tokens=False)["input_ids"]
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    assert [s.tolist() for s in seqs] == [bos + ids for ids in reference]
    assert all(s.dtype == torch.int64 and s.dim() == 1 for s in seqs)
    batched = corpus_perplexity(model, tokenizer, texts, max_length=32)
    assert batched.tokens == whole.tokens and batched.nll == pytest.approx(whole.nll, rel=1e-6)


def test_a_streamed_corpus_is_scored_group_by_group_with_the_same_result(tokenizer, model, monkeypatch):
    """A generator of texts is consumed one group at a time (the first forward runs before the stream is read
    whole) and gives the one-group result: the same counts, per-text NLLs and corpus NLL."""
    from hf_llmsys.evaluation import text_inputs

    texts = [CORPUS[i % len(CORPUS)][: 30 + 5 * i] for i in range(12)]
    whole = corpus_perplexity(model, tokenizer, texts, max_length=16, stride=8, return_token_nlls=True)
    monkeypatch.setattr(text_inputs, "GROUP_CHARS", 100)  # 2-3 texts a group
    pulled, pulled_at_forward = [], []

    def stream():
        for text in texts:
            pulled.append(text)
            yield text

    hook = model.register_forward_pre_hook(lambda *_: pulled_at_forward.append(len(pulled)))
    try:
        streamed = corpus_perplexity(model, tokenizer, stream(), max_length=16, stride=8, return_token_nlls=True)
    finally:
        hook.remove()
    assert pulled_at_forward[0] <= 3 < len(texts)  # scoring began with the first group, not the whole stream
    assert len(set(pulled_at_forward)) >= 4  # and went on group by group
    assert (streamed.tokens, streamed.words, streamed.bytes) == (whole.tokens, whole.words, whole.bytes)
    assert streamed.nll == pytest.approx(whole.nll, rel=1e-6)
    assert len(streamed.token_nlls) == len(texts)
    for ours, reference in zip(streamed.token_nlls, whole.token_nlls, strict=True):
        torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-5)


def test_a_bad_text_in_a_stream_is_named_by_its_place_in_the_stream(tokenizer, model, monkeypatch):
    from hf_llmsys.evaluation import text_inputs

    monkeypatch.setattr(text_inputs, "GROUP_CHARS", 100)
    texts = [CORPUS[0]] * 5
    with pytest.raises(ValueError, match=r"texts\[5\] is an empty string"):
        corpus_perplexity(model, tokenizer, iter([*texts, ""]), max_length=16)
    with pytest.raises(ValueError, match=r"texts\[3\] is a int"):
        corpus_perplexity(model, tokenizer, iter([*texts[:3], 7]), max_length=16)
    with pytest.raises(ValueError, match="text 5 has 1 token"):
        corpus_perplexity(model, tokenizer, iter([*texts, "a"]), max_length=16, add_start_token=False)
    with pytest.raises(ValueError, match="texts is empty"):
        corpus_perplexity(model, tokenizer, iter([]), max_length=16)


def test_a_streamed_corpus_has_one_progress_bar_whose_total_grows(tokenizer, model, monkeypatch):
    """Shown progress over several groups is one bar over every batch (not one bar per group)."""
    import tqdm.auto

    from hf_llmsys.evaluation import text_inputs

    bars = []

    class Bar:
        def __init__(self, total, **kwargs):
            self.total, self.n = total, 0
            bars.append(self)

        def update(self, n=1):
            self.n += n

        def refresh(self):
            pass

        def close(self):
            pass

    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    monkeypatch.setattr(text_inputs, "GROUP_CHARS", 100)  # 2-3 texts a group
    texts = [CORPUS[i % len(CORPUS)][: 30 + 5 * i] for i in range(12)]
    calls = []
    hook = model.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        corpus_perplexity(model, tokenizer, iter(texts), max_length=16, stride=8, batch_size=2, show_progress=True)
    finally:
        hook.remove()
    assert len(bars) == 1 and bars[0].total == bars[0].n == len(calls) > 4
    corpus_perplexity(model, tokenizer, iter(texts), max_length=16, stride=8, show_progress=False)
    assert len(bars) == 1
