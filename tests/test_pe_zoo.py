"""The positional-encoding zoo end to end on a tiny budget: output layout, zoo.json format, and what its rows say."""

from __future__ import annotations

import json

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from hf_llmsys.cli.zoo import main, parse_args
from hf_llmsys.data.corpus import load_default_corpus
from hf_llmsys.experiments.positional_zoo import FORMAT_VERSION, PRESETS
from hf_llmsys.models.positional_encodings import POSITIONAL_ENCODINGS


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo")
    text = root / "text.txt"
    text.write_text(load_default_corpus()[:60000], encoding="utf-8")
    main(["--quick", "--out", str(root / "out"), "--train-files", str(text)])
    return root / "out"


def test_layout_and_format(zoo):
    report = json.loads((zoo / "zoo.json").read_text())
    assert report["format_version"] == FORMAT_VERSION
    assert report["settings"]["eval_lengths"] == [16, 32]
    assert (zoo / "zoo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    names = [run["name"] for run in report["runs"]]
    assert set(POSITIONAL_ENCODINGS) <= set(names)
    assert {"rope+linear", "rope+dynamic", "rope+yarn"} <= set(names)
    assert not (zoo / "trainer").exists()
    tokenizer = AutoTokenizer.from_pretrained(zoo / "tokenizer")
    for run in report["runs"]:
        model = AutoModelForCausalLM.from_pretrained(zoo / run["checkpoint"])
        assert model.config.position_embedding_type == run["position_embedding_type"]
        assert model.config.vocab_size == len(tokenizer)
        for row in run["results"]:
            assert (row["ppl"] is None) == (row["error"] is not None)
            if row["ppl"] is not None:
                # three steps from a random start: about the uniform distribution's perplexity, never far worse
                assert 1.0 < row["ppl"] < 1.05 * len(tokenizer) and row["tokens"] > 0


def test_rope_scalings_change_nothing_within_the_training_length_and_act_beyond_it(zoo):
    """The rope+linear / dynamic / yarn rows score the rope checkpoint with a scaling: within the training length
    each scaling is applied by the length factor, 1 there, so their
    perplexity is rope's; past it each scaling changes the rotation, so each differs from rope's."""
    report = json.loads((zoo / "zoo.json").read_text())
    train_length = report["settings"]["train_length"]
    by_name = {run["name"]: {row["eval_length"]: row["ppl"] for row in run["results"]} for run in report["runs"]}
    rope = by_name["rope"]
    for name in ("rope+linear", "rope+dynamic", "rope+yarn"):
        for length, ppl in by_name[name].items():
            if length <= train_length:
                assert ppl == pytest.approx(rope[length], rel=1e-9), (name, length)
            else:
                assert ppl != pytest.approx(rope[length], rel=1e-9), (name, length)


def test_learned_positions_record_the_table_error_beyond_training_length(zoo):
    report = json.loads((zoo / "zoo.json").read_text())
    (learned,) = [run for run in report["runs"] if run["name"] == "learned"]
    beyond = [row for row in learned["results"] if row["eval_length"] > report["settings"]["train_length"]]
    assert beyond and all(row["ppl"] is None and "max_position_embeddings" in row["error"] for row in beyond)


def test_unknown_encoding_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="--encodings: unknown \\['fourier'\\]"):
        main(["--quick", "--out", str(tmp_path), "--encodings", "fourier"])


def test_presets_and_threads(tmp_path):
    settings = parse_args(["--preset", "demo", "--out", str(tmp_path)])
    assert settings.steps == PRESETS["demo"]["steps"] and settings.threads == 1 and settings.max_eval_chars == 40_000
    assert parse_args(["--quick", "--out", str(tmp_path)]).steps == PRESETS["smoke"]["steps"]
    with pytest.raises(ValueError, match="--threads must be >= 1"):
        main(["--out", str(tmp_path), "--threads", "0"])  # validated before any work


def test_threads_are_restored_after_the_zoo(zoo, tmp_path):
    import torch

    assert json.loads((zoo / "zoo.json").read_text())["settings"]["threads"] == 1  # the smoke preset: one thread
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        text = tmp_path / "text.txt"
        text.write_text(load_default_corpus()[:20000], encoding="utf-8")
        main(["--quick", "--out", str(tmp_path / "out"), "--encodings", "none", "--rope-scalings",
              "--train-files", str(text)])  # fmt: skip
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
