"""`llmsys train --model_type llmsys_t5` end to end on tiny data: artefacts, metrics by hand, user errors."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig

from hf_llmsys.cli import main
from hf_llmsys.data.corpus import load_default_corpus
from hf_llmsys.data.span_corruption import input_and_target_lengths
from hf_llmsys.models import LlmsysT5ForConditionalGeneration
from hf_llmsys.training import seq2seq_train, train

TINY_T5 = [
    "--model_type", "llmsys_t5", "--hidden_size", "32", "--intermediate_size", "64", "--num_hidden_layers", "1",
    "--num_decoder_layers", "2", "--num_attention_heads", "2", "--head_dim", "24", "--vocab_size", "300",
    "--block_size", "32", "--chunk_chars", "1024", "--per_device_train_batch_size", "4",
    "--per_device_eval_batch_size", "8", "--logging_steps", "2", "--disable_tqdm", "true",
    "--validation_fraction", "0.2", "--feed_forward_proj", "gated-gelu",
]  # fmt: skip


def run(text_file, out, *extra):
    return main(["train", "--train_files", str(text_file), "--output_dir", str(out), *TINY_T5, *extra])


@pytest.fixture(scope="module")
def trained(text_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("t5run") / "model"
    assert run(text_file, out, "--max_steps", "4", "--save_steps", "2") == 0
    return out


def test_saved_t5_loads_and_generates(trained):
    tokenizer = AutoTokenizer.from_pretrained(trained)
    model = AutoModelForSeq2SeqLM.from_pretrained(trained).eval()
    assert isinstance(model, LlmsysT5ForConditionalGeneration)
    assert (model.config.num_layers, model.config.num_decoder_layers, model.config.d_kv) == (1, 2, 24)
    assert model.config.mlp_gated and model.config.vocab_size == len(tokenizer) <= 300
    assert tokenizer.convert_tokens_to_ids("<extra_id_0>") == len(tokenizer) - 1
    assert tokenizer.model_max_length == 32
    gen = GenerationConfig.from_pretrained(trained)
    assert (gen.decoder_start_token_id, gen.eos_token_id, gen.pad_token_id) == (0, 1, 0)
    ids = tokenizer("The old man <extra_id_0> the sea.", return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=5, num_beams=2)
    assert out[0, 0].item() == 0


def test_validation_loss_by_hand(trained, text_file):
    results = json.loads((trained / "train_results.json").read_text())
    assert results["global_step"] == 4 and results["raw_length"] == 34 and results["target_length"] == 8
    assert results["val_perplexity"] == pytest.approx(torch.tensor(results["val_loss"]).exp().item(), rel=1e-6)
    tokenizer = AutoTokenizer.from_pretrained(trained)
    model = LlmsysT5ForConditionalGeneration.from_pretrained(trained).eval()
    args = train.DataArguments(train_files=[str(text_file)], chunk_chars=1024, validation_fraction=0.2)
    _, val_chunks = train.split_chunks(train.load_chunks(args), 0.2, seed=42)
    collator = seq2seq_train.make_collator(tokenizer, args, 32, seed=42)
    raw = seq2seq_train.raw_examples(val_chunks, tokenizer, collator.raw_length, "validation", 32)
    val = seq2seq_train.corrupted_once(raw, collator, 42 + seq2seq_train.VALIDATION_SEED_OFFSET)
    batch = collator([val[i] for i in range(len(val))])
    assert int(batch["attention_mask"].sum(-1).min()) == 32  # every validation input is exactly block_size long
    with torch.no_grad():
        loss = model(**batch).loss.item()
    assert results["val_loss"] == pytest.approx(loss, rel=1e-4)
    assert results["validation_target_tokens"] == len(val) * 8


def test_corpus_too_short_names_the_field_and_fix(tmp_path, capsys):
    short = tmp_path / "short.txt"
    short.write_text(load_default_corpus()[:3000], encoding="utf-8")
    raw, _ = input_and_target_lengths(2048)
    assert run(short, tmp_path / "m", "--block_size", "2048", "--max_steps", "1") == 2
    err = capsys.readouterr().err
    assert "--block_size 2048" in err and f"needs {raw} raw tokens" in err and "smaller --block_size" in err
    assert not (tmp_path / "m" / "config.json").exists()


def test_unknown_model_type(text_file, tmp_path, capsys):
    assert main(["train", "--train_files", str(text_file), "--output_dir", str(tmp_path), "--model_type", "gpt9"]) == 2
    assert "--model_type 'gpt9' is unknown" in capsys.readouterr().err


def test_other_t5_shape_in_output_dir_is_refused(trained, text_file, capsys):
    assert run(text_file, trained, "--max_steps", "1", "--num_decoder_layers", "3") == 2
    assert "num_decoder_layers: 2 != 3" in capsys.readouterr().err


def test_resume_matches_uninterrupted_run(text_file, tmp_path, capsys):
    """Resuming the step-2 checkpoint of a 4-step run reproduces that run (weights and corruption stream)."""
    full = tmp_path / "full"
    assert run(text_file, full, "--max_steps", "4", "--save_steps", "2") == 0
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(full / "checkpoint-2", resumed / "checkpoint-2")
    capsys.readouterr()
    assert run(text_file, resumed, "--max_steps", "4", "--save_steps", "2") == 0
    assert f"resuming from {resumed / 'checkpoint-2'}" in capsys.readouterr().err
    a = LlmsysT5ForConditionalGeneration.from_pretrained(full / "checkpoint-4").state_dict()
    b = LlmsysT5ForConditionalGeneration.from_pretrained(resumed).state_dict()
    for name, tensor in a.items():
        torch.testing.assert_close(b[name], tensor, rtol=1e-4, atol=1e-5, msg=name)


def test_seq2seq_perplexity_of_the_trained_model_equals_transformers_t5(trained, tmp_path):
    """The toolkit's seq2seq perplexity gives the same figure for our model and transformers' T5 on its weights."""
    from transformers import T5Config, T5ForConditionalGeneration

    from hf_llmsys.evaluation import seq2seq_perplexity

    tokenizer = AutoTokenizer.from_pretrained(trained)
    ours = LlmsysT5ForConditionalGeneration.from_pretrained(trained).eval()
    config = ours.config
    reference_config = T5Config(
        vocab_size=config.vocab_size, d_model=config.d_model, d_kv=config.d_kv, d_ff=config.d_ff,
        num_layers=config.num_layers, num_decoder_layers=config.num_decoder_layers, num_heads=config.num_heads,
        feed_forward_proj="gated-gelu", tie_word_embeddings=config.tie_word_embeddings, decoder_start_token_id=0,
    )  # fmt: skip
    theirs = T5ForConditionalGeneration.from_pretrained(trained, config=reference_config).eval()
    sources = ["The old <extra_id_0> and the sea.", "A dictionary <extra_id_0> words."]
    targets = ["<extra_id_0> man <extra_id_1>", "<extra_id_0> of <extra_id_1>"]
    mine = seq2seq_perplexity(ours, tokenizer, sources, targets, batch_size=2)
    reference = seq2seq_perplexity(theirs, tokenizer, sources, targets, batch_size=2)
    assert mine.tokens == reference.tokens and mine.ppl == pytest.approx(reference.ppl, rel=1e-5)


def test_same_seed_same_t5_weights(trained, text_file, tmp_path):
    """Span-corruption pre-training: two identical runs end with identical weights (init seeded before the model).

    One saved tokenizer for both: the `tokenizers` Unigram trainer itself is not deterministic between calls.
    """
    for name in ("a", "b"):
        extra = ["--max_steps", "2", "--save_steps", "100", "--tokenizer", str(trained)]
        assert run(text_file, tmp_path / name, *extra) == 0
        torch.rand(1000)
    a = LlmsysT5ForConditionalGeneration.from_pretrained(tmp_path / "a").state_dict()
    b = LlmsysT5ForConditionalGeneration.from_pretrained(tmp_path / "b").state_dict()
    for name, tensor in a.items():
        assert torch.equal(b[name], tensor), name
