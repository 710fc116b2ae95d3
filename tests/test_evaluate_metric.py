"""The shipped `evaluate` metric equals corpus_perplexity; how evaluate's own `perplexity` differs, and why.

evaluate's own metric (evaluate-metric/perplexity) lives on the Hub. Where it can be loaded, one test runs it
beside ours; everywhere, `evaluate_style_perplexity` below re-derives its documented definition (per-text
perplexity of the text truncated to max_length with a start token, then an unweighted mean over texts) and the
tests check the exact relationships with our token-weighted, sliding-window corpus perplexity.
"""

import math
import os

for _name in ("HF_HUB_OFFLINE", "HF_EVALUATE_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_name, "1")  # no Hub here: fail fast instead of waiting on the network

import evaluate  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from hf_llmsys.data.corpus import load_default_corpus  # noqa: E402
from hf_llmsys.data.tokenizer import train_bpe_tokenizer  # noqa: E402
from hf_llmsys.evaluation.metrics import metric_path  # noqa: E402
from hf_llmsys.evaluation.perplexity import corpus_perplexity  # noqa: E402
from hf_llmsys.models import LlmsysLlamaConfig, LlmsysLlamaForCausalLM  # noqa: E402

MAX_LENGTH = 48


@pytest.fixture(scope="module")
def corpus():
    return load_default_corpus()[:20000]


@pytest.fixture(scope="module")
def tokenizer(corpus):
    return train_bpe_tokenizer([corpus], vocab_size=300, model_max_length=MAX_LENGTH)


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)  # initializer_range 0.1: per-text losses differ enough for the weightings to disagree
    config = LlmsysLlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        max_position_embeddings=MAX_LENGTH, initializer_range=0.1, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    return LlmsysLlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def saved_model(model, tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ppl_model")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def metric():
    return evaluate.load(metric_path(), keep_in_memory=True)


def texts_of_tokens(tokenizer, corpus, counts):
    """Texts cut from `corpus` with exactly `counts[i]` tokens each (decoded from consecutive token ids)."""
    ids = tokenizer(corpus, add_special_tokens=False, verbose=False)["input_ids"]
    texts, start = [], 0
    for n in counts:
        texts.append(tokenizer.decode(ids[start : start + n]))
        start += n
    assert [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts] == list(counts)
    return texts


def text_token_nlls(model, ids):
    """NLL (nats) of ids[1:] given their prefix, in one forward pass."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1]
    return F.cross_entropy(logits.float(), torch.tensor(ids[1:]), reduction="none")


def evaluate_style_perplexity(model, tokenizer, texts, max_length):
    """evaluate's documented `perplexity`: per text, bos + its first max_length - 1 tokens; unweighted mean."""
    per_text = []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"][: max_length - 1]
        per_text.append(math.exp(text_token_nlls(model, [tokenizer.bos_token_id, *ids]).mean().item()))
    return {"perplexities": per_text, "mean_perplexity": sum(per_text) / len(per_text)}


def ours(model, tokenizer, texts, **kwargs):
    return corpus_perplexity(model, tokenizer, texts, max_length=MAX_LENGTH, show_progress=False, **kwargs)


def test_metric_path_points_at_the_script():
    assert os.path.isfile(os.path.join(metric_path(), "llmsys_perplexity.py"))
    assert os.path.isfile(os.path.join(metric_path(), "README.md"))
    with pytest.raises(ValueError, match="no shipped metric 'nope'"):
        metric_path("nope")


def test_metric_equals_corpus_perplexity(metric, model, tokenizer, corpus):
    texts = [corpus[:300], corpus[300:340], corpus[1000:1900]]  # the last one is longer than one window
    got = metric.compute(predictions=texts, model=model, tokenizer=tokenizer, max_length=MAX_LENGTH, stride=16)
    r = ours(model, tokenizer, texts, stride=16)
    want = {
        "perplexity": r.ppl, "tokens": r.tokens, "word_perplexity": r.word_ppl, "byte_perplexity": r.byte_ppl,
        "bits_per_byte": r.bits_per_byte, "nll": r.nll, "words": r.words, "bytes": r.bytes,
    }  # fmt: skip
    assert got == pytest.approx(want, rel=1e-6)
    assert got["tokens"] == sum(len(tokenizer(t)["input_ids"]) for t in texts)  # every token scored


def test_metric_loads_a_model_path(metric, saved_model, model, tokenizer, corpus):
    texts = [corpus[:200], corpus[500:560]]
    got = metric.compute(predictions=texts, model=str(saved_model), max_length=MAX_LENGTH)
    assert got["perplexity"] == pytest.approx(ours(model, tokenizer, texts).ppl, rel=1e-5)


def test_metric_needs_a_tokenizer_with_a_model_object(metric, model):
    with pytest.raises(ValueError, match="pass tokenizer="):
        metric.compute(predictions=["Hello there."], model=model)


def test_evaluate_hub_perplexity_beside_ours(saved_model, model, tokenizer, corpus):
    try:
        theirs_metric = evaluate.load("perplexity", module_type="metric")
    except Exception as err:  # offline: FileNotFoundError/ConnectionError from the Hub lookup
        pytest.skip(f"evaluate's own perplexity metric is on the Hub and cannot be loaded here: {err!r}"[:300])
    texts = texts_of_tokens(tokenizer, corpus, [3, 40, 12])  # all shorter than max_length: no truncation
    theirs = theirs_metric.compute(predictions=texts, model_id=str(saved_model), max_length=MAX_LENGTH, device="cpu")
    per_text = [ours(model, tokenizer, t).ppl for t in texts]
    assert theirs["perplexities"] == pytest.approx(per_text, rel=1e-4)
    assert theirs["mean_perplexity"] == pytest.approx(sum(per_text) / len(per_text), rel=1e-4)


def test_single_short_text_gives_the_same_number(model, tokenizer, corpus):
    (text,) = texts_of_tokens(tokenizer, corpus, [30])
    theirs = evaluate_style_perplexity(model, tokenizer, [text], MAX_LENGTH)
    assert theirs["mean_perplexity"] == pytest.approx(ours(model, tokenizer, [text]).ppl, rel=1e-5)


def test_mean_of_perplexities_is_not_corpus_perplexity(model, tokenizer, corpus):
    texts = texts_of_tokens(tokenizer, corpus, [2, 3, 40])  # very different lengths, all within one window
    theirs = evaluate_style_perplexity(model, tokenizer, texts, MAX_LENGTH)
    result = ours(model, tokenizer, texts)
    counts = [2, 3, 40]
    # ours is the token-weighted geometric mean of the per-text perplexities; theirs the arithmetic mean
    weighted = math.exp(sum(n * math.log(p) for n, p in zip(counts, theirs["perplexities"], strict=True)) / 45)
    assert result.tokens == 45
    assert result.ppl == pytest.approx(weighted, rel=1e-5)
    assert abs(theirs["mean_perplexity"] - result.ppl) > 0.05 * result.ppl
    print(f"\nevaluate-style mean_perplexity {theirs['mean_perplexity']:.2f} vs corpus perplexity {result.ppl:.2f}")


def test_equal_lengths_jensen_and_equality_for_identical_texts(model, tokenizer, corpus):
    texts = texts_of_tokens(tokenizer, corpus, [20, 20, 20])
    theirs = evaluate_style_perplexity(model, tokenizer, texts, MAX_LENGTH)
    assert theirs["mean_perplexity"] > ours(model, tokenizer, texts).ppl  # exp convex; per-text losses differ
    same = [texts[0]] * 3
    assert evaluate_style_perplexity(model, tokenizer, same, MAX_LENGTH)["mean_perplexity"] == pytest.approx(
        ours(model, tokenizer, same).ppl, rel=1e-5
    )


def test_truncation_drops_tokens_we_score(model, tokenizer, corpus):
    (text,) = texts_of_tokens(tokenizer, corpus, [150])  # > max_length
    theirs = evaluate_style_perplexity(model, tokenizer, [text], MAX_LENGTH)
    result = ours(model, tokenizer, [text], return_token_nlls=True)
    assert result.tokens == 150  # every token, through sliding windows
    first = result.token_nlls[0][: MAX_LENGTH - 1]  # what evaluate keeps: the first max_length - 1 tokens
    assert theirs["perplexities"][0] == pytest.approx(math.exp(first.mean().item()), rel=1e-5)
    assert theirs["perplexities"][0] != pytest.approx(result.ppl, rel=1e-3)
