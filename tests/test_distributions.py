"""Entropy, cross-entropy, KL and perplexity: identities from their definitions, on torch and numpy inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hf_llmsys.evaluation import cross_entropy, entropy, kl_divergence, perplexity_from_entropy


def _random_pair(kind: str, shape=(5, 7)):
    """Two batches of random distributions (..., V), torch float64 or numpy."""
    gen = torch.Generator().manual_seed(1)
    p = torch.rand(shape, generator=gen, dtype=torch.float64).softmax(-1)
    q = (3 * torch.rand(shape, generator=gen, dtype=torch.float64)).softmax(-1)
    return (p, q) if kind == "torch" else (p.numpy(), q.numpy())


@pytest.mark.parametrize("kind", ["torch", "numpy"])
def test_cross_entropy_is_entropy_plus_kl(kind):
    p, q = _random_pair(kind)
    h_pq, h_p, kl = cross_entropy(p, q), entropy(p), kl_divergence(p, q)
    assert isinstance(h_pq, torch.Tensor if kind == "torch" else np.ndarray)
    assert tuple(h_pq.shape) == (5,)
    np.testing.assert_allclose(np.asarray(h_pq), np.asarray(h_p + kl), rtol=1e-12)


@pytest.mark.parametrize("kind", ["torch", "numpy"])
def test_kl_self_zero_and_non_negative(kind):
    p, q = _random_pair(kind)
    assert float(abs(kl_divergence(p, p)).max()) < 1e-12
    assert float(kl_divergence(p, q).min()) > 0
    assert float(kl_divergence(q, p).min()) > 0


@pytest.mark.parametrize("kind", ["torch", "numpy"])
@pytest.mark.parametrize("vocab", [1, 2, 50, 50257])
def test_uniform_gives_vocab_size_and_one_hot_gives_one(kind, vocab):
    uniform = torch.full((vocab,), 1.0 / vocab, dtype=torch.float64)
    one_hot = torch.zeros(vocab, dtype=torch.float64)
    one_hot[vocab // 2] = 1.0
    if kind == "numpy":
        uniform, one_hot = uniform.numpy(), one_hot.numpy()
    assert float(perplexity_from_entropy(entropy(uniform))) == pytest.approx(vocab, rel=1e-9)
    assert float(perplexity_from_entropy(entropy(uniform, base=2), base=2)) == pytest.approx(vocab, rel=1e-9)
    assert float(entropy(one_hot)) == 0.0
    assert float(perplexity_from_entropy(entropy(one_hot))) == 1.0


def test_bits_versus_nats():
    p, q = _random_pair("torch")
    for fn, args in ((entropy, (p,)), (cross_entropy, (p, q)), (kl_divergence, (p, q))):
        nats, bits = fn(*args), fn(*args, base=2)
        torch.testing.assert_close(bits, nats / math.log(2))
        torch.testing.assert_close(fn(*args, base="bits"), bits)
    assert perplexity_from_entropy(3.0, base=2) == 8.0
    assert perplexity_from_entropy(1.0) == pytest.approx(math.e)


def test_zero_probabilities():
    p = torch.tensor([0.5, 0.5, 0.0])
    q = torch.tensor([0.5, 0.0, 0.5])
    assert float(entropy(p)) == pytest.approx(math.log(2))  # 0 log 0 = 0, no NaN
    assert float(cross_entropy(p, torch.tensor([0.5, 0.5, 0.0]))) == pytest.approx(math.log(2))
    assert math.isinf(float(cross_entropy(p, q)))  # p > 0 where q = 0
    assert math.isinf(float(kl_divergence(p, q)))
    assert np.isinf(kl_divergence(p.numpy(), q.numpy()))
    assert float(kl_divergence(q.numpy(), q.numpy())) == 0.0


def test_float32_torch_keeps_dtype_and_lists_work():
    p, q = (t.float() for t in _random_pair("torch"))
    assert cross_entropy(p, q).dtype == torch.float32
    assert float(entropy([0.25, 0.25, 0.25, 0.25])) == pytest.approx(math.log(4))


@pytest.mark.parametrize(
    "p, q, match",
    [
        ([0.5, 0.6], [0.5, 0.5], "p does not sum to 1"),
        ([0.5, 0.5], [0.9, 0.2], "q does not sum to 1"),
        ([1.5, -0.5], [0.5, 0.5], "p has negative"),
        ([0.5, 0.5], [float("nan"), 1.0], "q contains NaN"),
    ],
)
def test_invalid_inputs_name_the_argument(p, q, match):
    with pytest.raises(ValueError, match=match):
        kl_divergence(p, q)
    with pytest.raises(ValueError, match=match):
        cross_entropy(torch.tensor(p), torch.tensor(q))


def test_mixed_kinds_and_bad_base_rejected():
    p, q = _random_pair("torch")
    with pytest.raises(TypeError, match="both"):
        kl_divergence(p, q.numpy())
    with pytest.raises(ValueError, match="base"):
        entropy(p, base=10)
    with pytest.raises(ValueError, match="base"):
        perplexity_from_entropy(1.0, base="decibans")
