"""corpus_perplexity against lm-eval-harness 0.4.13 run side by side on the same model, tokenizer and texts.

- ``stride == max_length`` (disjoint windows) equals lm-eval's ``HFLM.loglikelihood_rolling`` per text.
- Any other stride equals lm-eval's own scoring (``HFLM._loglikelihood_tokens``) of the windows its
  ``get_rolling_token_windows`` lays with ``context_len = max_length - stride + 1``.
Text lengths are not multiples of the window, so every text ends in a partial window (the case that differed).
Skipped where lm_eval is not installed (a test-only extra).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from hf_llmsys import LlmsysLlamaConfig, LlmsysLlamaForCausalLM
from hf_llmsys.data.tokenizer import train_bpe_tokenizer
from hf_llmsys.evaluation import corpus_perplexity

pytest.importorskip("lm_eval", reason="lm-eval-harness is not installed (pip install lm_eval==0.4.13)")
from lm_eval import utils as lm_eval_utils  # noqa: E402
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.models.huggingface import HFLM  # noqa: E402

CORPUS = [
    "The quick brown fox jumps over the lazy dog while the cat sleeps in the warm sun.\n",
    "A hacker is a person who enjoys exploring the details of programmable systems.\n",
    "Money, n. A blessing that is of no advantage to us excepting when we part with it.\n",
    "Pack my box with five dozen liquor jugs, said the sphinx of black quartz, judge my vow.\n",
]
# No text repeats a window of another: lm-eval 0.4.13's one-token-continuation cache (group_by="contexts") scores
# a 1-token window whose input equals a longer window's input at the longer window's FIRST position (its gather
# is not trailing-sliced), so repeated text makes lm-eval, not the plan, wrong.
TEXTS = [CORPUS[0] + CORPUS[1] + CORPUS[2], CORPUS[3] + CORPUS[0][:40], "Money is a blessing."]
MAX_LENGTH = 16


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe_tokenizer(CORPUS * 10, vocab_size=300)


def _llmsys_llama(vocab_size: int):
    torch.manual_seed(0)
    config = LlmsysLlamaConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    return LlmsysLlamaForCausalLM(config).eval()


def _gpt2(vocab_size: int):
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=vocab_size, n_positions=MAX_LENGTH, n_embd=32, n_layer=2, n_head=2)
    return GPT2LMHeadModel(config).eval()


MODELS = {"llmsys_llama": _llmsys_llama, "gpt2": _gpt2}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request, tokenizer):
    return MODELS[request.param](len(tokenizer))


def _harness(model, tokenizer, max_length: int) -> HFLM:
    """lm-eval's HF wrapper on the model object: its prefix token is the tokenizer's bos, as our start token."""
    return HFLM(pretrained=model, tokenizer=tokenizer, max_length=max_length, batch_size=4, device="cpu",
                add_bos_token=False)  # fmt: skip


def _our_loglikelihoods(model, tokenizer, texts, max_length: int, stride: int) -> list[float]:
    result = corpus_perplexity(model, tokenizer, texts, max_length=max_length, stride=stride, return_token_nlls=True)
    return [-float(nlls.double().sum()) for nlls in result.token_nlls]


def test_disjoint_windows_equal_loglikelihood_rolling(model, tokenizer):
    harness = _harness(model, tokenizer, MAX_LENGTH)
    requests = [Instance("loglikelihood_rolling", {}, (text,), i) for i, text in enumerate(TEXTS)]
    theirs = harness.loglikelihood_rolling(requests, disable_tqdm=True)
    ours = _our_loglikelihoods(model, tokenizer, TEXTS, MAX_LENGTH, stride=MAX_LENGTH)
    assert len(tokenizer(TEXTS[0])["input_ids"]) % MAX_LENGTH != 0  # a partial final window
    assert ours == pytest.approx(theirs, rel=1e-6)


@pytest.mark.parametrize("stride", [5, 8])
def test_overlapping_windows_equal_lm_eval_rolling_windows(model, tokenizer, stride):
    harness = _harness(model, tokenizer, MAX_LENGTH)
    theirs = []
    for text in TEXTS:
        windows = lm_eval_utils.get_rolling_token_windows(
            token_list=harness.tok_encode(text), prefix_token=harness.prefix_token_id,
            max_seq_len=MAX_LENGTH, context_len=MAX_LENGTH - stride + 1,
        )  # fmt: skip
        requests = [(None, *lm_eval_utils.make_disjoint_window(w)) for w in windows]
        theirs.append(sum(ll for ll, _ in harness._loglikelihood_tokens(requests, disable_tqdm=True)))
    assert _our_loglikelihoods(model, tokenizer, TEXTS, MAX_LENGTH, stride) == pytest.approx(theirs, rel=1e-6)


def _smollm2_folder() -> Path:
    """The converted checkpoint (hf_llmsys.checkpoints.smollm2: ~/.cache/hf_llmsys/smollm2 or LLMSYS_SMOLLM2_DIR)."""
    from hf_llmsys.checkpoints.smollm2 import find_smollm2

    folder = find_smollm2()
    if folder is None:
        pytest.skip("SmolLM2 checkpoint not converted (python scripts/fetch_smollm2.py; or set LLMSYS_SMOLLM2_DIR)")
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("implementation", ["transformers", "llmsys_llama"])
def test_smollm2_on_held_out_text_equals_loglikelihood_rolling(shared_data, implementation):
    """The real checkpoint on WikiText-2 validation paragraphs, as transformers loads it and as our llmsys_llama."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = _smollm2_folder()
    model_class = AutoModelForCausalLM if implementation == "transformers" else LlmsysLlamaForCausalLM
    model = model_class.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    lines = (shared_data / "wikitext-2-valid.tokens").read_text(encoding="utf-8").splitlines()
    max_length = 128
    paragraphs = [line.strip() for line in lines if len(line.split()) > 120]  # ~150-400 tokens each
    texts = [t for t in paragraphs if len(tokenizer(t, add_special_tokens=False)["input_ids"]) % max_length][:4]
    if tokenizer.bos_token_id is None:  # lm-eval's prefix token is bos, else eos: give ours the same start
        tokenizer.bos_token = tokenizer.eos_token
    requests = [Instance("loglikelihood_rolling", {}, (text,), i) for i, text in enumerate(texts)]
    theirs = _harness(model, tokenizer, max_length).loglikelihood_rolling(requests, disable_tqdm=True)
    ours = _our_loglikelihoods(model, tokenizer, texts, max_length, stride=max_length)
    assert ours == pytest.approx(theirs, rel=1e-5)
