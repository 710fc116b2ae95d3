"""The positional-encoding zoo end to end on a tiny budget: output layout and zoo.json format."""

from __future__ import annotations

import json

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from hf_llmsys.data.corpus import load_default_corpus
from hf_llmsys.experiments.positional_zoo import FORMAT_VERSION, PRESETS, main, parse_args
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
                assert 1.0 < row["ppl"] < 10 * len(tokenizer) and row["tokens"] > 0


def test_learned_positions_record_the_table_error_beyond_training_length(zoo):
    report = json.loads((zoo / "zoo.json").read_text())
    learned = [run for run in report["runs"] if run["name"] == "learned"]
    if not learned:
        pytest.skip("the 'learned' encoding is not registered")
    beyond = [row for row in learned[0]["results"] if row["eval_length"] > report["settings"]["train_length"]]
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
