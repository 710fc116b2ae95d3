"""The learning result of issue 56 (Arora et al. 2023, "Zoology"), at benchmarks/hybrid_attention.py's sizes: on
multi-query associative recall (8 pairs, the answers not shown), all-dense, 3 linear : 1 dense and all-linear models
of the same width and depth train for equal steps. All three learn to bind keys to values; all-linear recalls less
than all-dense, and the hybrid, with one dense layer in four, recalls as the all-dense model does. About 14 minutes
on one CPU thread."""

from __future__ import annotations

import pytest
import torch

from benchmarks import hybrid_attention


@pytest.mark.slow
def test_the_hybrid_recalls_as_dense_does_and_more_than_all_linear():
    args = hybrid_attention.parse_args(["--part", "recall"])
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        recall = hybrid_attention.measure_recall(args)
    finally:
        torch.set_num_threads(threads)
    models = recall["models"]
    dense, hybrid, linear = (models[name]["accuracy"] for name in ("dense", "hybrid 3:1", "linear"))
    assert min(dense, hybrid, linear) > recall["unbound_guess"] + 0.5, f"every model should bind: {models}"
    assert dense > linear and hybrid > linear, models
    assert hybrid >= dense - 0.01, models
