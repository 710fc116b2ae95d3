"""The learning check of `llmsys dpo` (benchmarks.dpo_learning): a preference is learned, and TRL's own
DPOTrainer side by side on the same SFT folder, pairs and settings reaches the same.

The slow test runs the bench as committed (benchmarks/results/dpo_learning-cpu.json: both model types, the default
settings, about 5 minutes on 2 cores) and holds its claims; the default test runs it on a few pairs and steps, only
to keep the script working and its results file well formed.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")


def _bench():
    from benchmarks import dpo_learning

    return dpo_learning


def test_the_bench_runs_and_writes_its_results_file(tmp_path):
    out = tmp_path / "dpo_learning.json"
    _bench().main(["--model_types", "llmsys_llama", "--sft_steps", "4", "--dpo_steps", "2", "--sft_prompts", "32",
                   "--pairs", "8", "--held_out", "4", "--batch", "4", "--json", str(out)])  # fmt: skip
    results = json.loads(out.read_text())
    run = results["runs"]["llmsys_llama"]
    assert set(run) == {"before", "ours", "trl", "checks"} and results["benchmark"] == "dpo_learning"
    assert {"rule_share", "copy_share", "preference_accuracy", "reward_margin", "dpo_loss"} <= set(run["ours"])
    assert "| llmsys_llama: held-out reward margin after DPO |" in out.with_suffix(".md").read_text()


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_dpo_learns_the_preferred_rule_and_trl_side_by_side_reaches_the_same(tmp_path):
    results = _bench().main(["--json", str(tmp_path / "dpo_learning.json")])
    for model_type, run in results["runs"].items():
        before, ours, trl = run["before"], run["ours"], run["trl"]
        assert all(run["checks"].values()), (model_type, run["checks"])
        # the SFT model mostly copies: the rule is one it does not follow
        assert before["rule_share"] <= 0.05 and before["copy_share"] >= 0.8, (model_type, before)
        # DPO moves it: positive margin, chosen preferred on most held-out pairs, the rule followed more often
        assert ours["reward_margin"] > 0.3 and ours["reward_accuracy"] >= 0.9, (model_type, ours)
        assert ours["preference_accuracy"] >= before["preference_accuracy"] + 0.5, (model_type, ours)
        assert ours["rule_share"] >= before["rule_share"] + 0.15, (model_type, ours)
        assert ours["copy_share"] <= 0.1, (model_type, ours)
        # the summary's own preference accuracy (TRL's fused head) agrees with the plain forward pass
        assert abs(ours["summary_preference_accuracy"] - ours["preference_accuracy"]) <= 0.02
        assert abs(ours["rule_share"] - trl["rule_share"]) <= 0.05
