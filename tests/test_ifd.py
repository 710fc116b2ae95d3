"""IFD (Li et al. 2023): scores against the model's own loss, batching, a context-free model, selection, CLI."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.modeling_outputs import CausalLMOutput

from hf_llmsys.cli import main
from hf_llmsys.data.tokenizer import train_bpe_tokenizer
from hf_llmsys.evaluation.alpaca import format_prompt, load_alpaca, validate_records
from hf_llmsys.evaluation.ifd import ifd_scores, select_by_ifd, write_selected
from hf_llmsys.models import LlmsysLlamaConfig, LlmsysLlamaForCausalLM

RECORDS = [
    {"instruction": "Give three tips for staying healthy.", "input": "", "output": "Eat well, sleep, and move."},
    {"instruction": "Translate to French.", "input": "Good morning, friend.", "output": "Bonjour, mon ami."},
    {"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"},
    {"instruction": "Name a colour.", "input": "", "output": "Blue is a colour of the sky and of the sea at noon."},
    {"instruction": "Summarise the text.", "input": "Cats sleep a lot. Dogs bark.", "output": "Pets differ."},
]


@pytest.fixture(scope="module")
def tokenizer():
    texts = [format_prompt(r) + r["output"] for r in RECORDS] * 20
    return train_bpe_tokenizer(texts, vocab_size=300, model_max_length=512)


def tiny_config(tokenizer, **overrides):
    """A tiny LLaMA-style config sized for `tokenizer`."""
    fields = dict(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=512, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    return {**fields, **overrides}


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    return LlmsysLlamaForCausalLM(LlmsysLlamaConfig(**tiny_config(tokenizer))).eval()


def answer_loss_by_hand(model, tokenizer, prompt_ids, answer_ids):
    """Mean cross-entropy of `answer_ids` after [bos] + `prompt_ids`, from the logits and from labels."""
    ids = torch.tensor([[tokenizer.bos_token_id, *prompt_ids, *answer_ids]])
    labels = ids.clone()
    labels[0, : 1 + len(prompt_ids)] = -100
    with torch.no_grad():
        out = model(input_ids=ids, labels=labels)
    logits = out.logits[0, len(prompt_ids) : len(prompt_ids) + len(answer_ids)]  # row t predicts token t + 1
    by_logits = F.cross_entropy(logits, torch.tensor(answer_ids)).item()
    assert by_logits == pytest.approx(out.loss.item(), rel=1e-5)
    return by_logits


def encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_alpaca_templates_are_stanfords():
    with_input = format_prompt({"instruction": "Do X.", "input": "data", "output": "y"})
    assert with_input == (
        "Below is an instruction that describes a task, paired with an input that provides further context. "
        "Write a response that appropriately completes the request.\n\n"
        "### Instruction:\nDo X.\n\n### Input:\ndata\n\n### Response:"
    )
    without = format_prompt({"instruction": "Do X.", "input": "", "output": "y"})
    assert without == (
        "Below is an instruction that describes a task. Write a response that appropriately completes the "
        "request.\n\n### Instruction:\nDo X.\n\n### Response:"
    )


def test_ifd_equals_direct_computation(model, tokenizer):
    scores = ifd_scores(model, tokenizer, RECORDS, batch_size=4)
    assert len(scores) == len(RECORDS)
    for record, score in zip(RECORDS, scores, strict=True):
        prompt, answer = encode(tokenizer, format_prompt(record)), encode(tokenizer, record["output"])
        conditioned = answer_loss_by_hand(model, tokenizer, prompt, answer)
        alone = answer_loss_by_hand(model, tokenizer, [], answer)
        assert score["answer_tokens"] == len(answer)
        assert score["loss_conditioned"] == pytest.approx(conditioned, rel=1e-5)
        assert score["loss_answer"] == pytest.approx(alone, rel=1e-5)
        assert score["ifd"] == pytest.approx(conditioned / alone, rel=1e-5)
    assert {bool(r["input"]) for r in RECORDS} == {True, False}


def test_batch_size_independent(model, tokenizer):
    reference = ifd_scores(model, tokenizer, RECORDS, batch_size=1)
    for batch_size in (2, 3, 16):
        scores = ifd_scores(model, tokenizer, RECORDS, batch_size=batch_size)
        for got, want in zip(scores, reference, strict=True):
            assert got["ifd"] == pytest.approx(want["ifd"], rel=1e-5)
            assert got["loss_conditioned"] == pytest.approx(want["loss_conditioned"], rel=1e-5)


def test_training_flag_restored(model, tokenizer):
    model.train()
    try:
        ifd_scores(model, tokenizer, RECORDS[:1])
        assert model.training
    finally:
        model.eval()


class UnigramLM(nn.Module):
    """Logits that ignore the context: the same learned distribution at every position."""

    def __init__(self, vocab_size):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(vocab_size))

    def forward(self, input_ids, attention_mask=None):
        return CausalLMOutput(logits=self.bias.expand(*input_ids.shape, -1))


def test_context_free_model_has_ifd_exactly_one(tokenizer):
    scores = ifd_scores(UnigramLM(len(tokenizer)), tokenizer, RECORDS, max_length=256, batch_size=3)
    assert [s["ifd"] for s in scores] == [1.0] * len(RECORDS)
    assert all(s["loss_answer"] > 0 for s in scores)


def test_context_free_model_needs_max_length(tokenizer):
    tokenizer_without_limit = train_bpe_tokenizer(["abc abc"], vocab_size=260, model_max_length=10**30)
    with pytest.raises(ValueError, match="max_length"):
        ifd_scores(UnigramLM(len(tokenizer_without_limit)), tokenizer_without_limit, RECORDS[:1])


def test_truncation_keeps_the_prompt_and_cuts_the_answer(model, tokenizer):
    record = RECORDS[3]
    prompt, answer = encode(tokenizer, format_prompt(record)), encode(tokenizer, record["output"])
    max_length = 1 + len(prompt) + 3  # start token + the whole prompt + the answer's first 3 tokens
    (score,) = ifd_scores(model, tokenizer, [record], max_length=max_length)
    assert score["answer_tokens"] == 3
    assert score["loss_conditioned"] == pytest.approx(answer_loss_by_hand(model, tokenizer, prompt, answer[:3]))
    assert score["loss_answer"] == pytest.approx(answer_loss_by_hand(model, tokenizer, [], answer[:3]))


def test_a_prompt_that_does_not_fit_is_dropped_never_scored_one(model, tokenizer):
    prompt = encode(tokenizer, format_prompt(RECORDS[3]))
    for max_length in (4, 1 + len(prompt)):  # the prompt cut away / the whole prompt but no answer token
        scores = ifd_scores(model, tokenizer, RECORDS, max_length=max_length)
        dropped = [s for s in scores if s["ifd"] is None]
        assert dropped and all(s["dropped"] == "prompt does not fit" for s in dropped)
        assert 1.0 not in [s["ifd"] for s in scores]
        assert select_by_ifd(RECORDS, scores, keep=1.0, drop_above_one=False) == [
            {**r, "ifd": s["ifd"]} for r, s in zip(RECORDS, scores, strict=True) if s["ifd"] is not None
        ]
    assert ifd_scores(model, tokenizer, RECORDS[3:4], max_length=len(prompt) + 2)[0]["answer_tokens"] == 1


def test_an_empty_record_list_is_refused_as_empty(model, tokenizer):
    with pytest.raises(ValueError, match="the record list is empty"):
        ifd_scores(model, tokenizer, [])


def test_transformers_and_peft_models(tokenizer):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(1)
    llama = LlamaForCausalLM(LlamaConfig(**tiny_config(tokenizer))).eval()
    base = ifd_scores(llama, tokenizer, RECORDS)
    prompt, answer = encode(tokenizer, format_prompt(RECORDS[1])), encode(tokenizer, RECORDS[1]["output"])
    assert base[1]["loss_conditioned"] == pytest.approx(answer_loss_by_hand(llama, tokenizer, prompt, answer))
    peft_model = get_peft_model(llama, LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    wrapped = ifd_scores(peft_model, tokenizer, RECORDS)  # LoRA's B starts at zero: the same function
    assert [s["ifd"] for s in wrapped] == pytest.approx([s["ifd"] for s in base], rel=1e-5)


@pytest.mark.parametrize(
    ("records", "match"),
    [
        ([RECORDS[0], {"instruction": "x", "input": ""}], r"record 1: missing field 'output'"),
        ([{"input": "", "output": "y"}], r"record 0: missing field 'instruction'"),
        ([RECORDS[0], RECORDS[1], {"instruction": "x", "output": "y"}], r"record 2: missing field 'input'"),
        ([{"instruction": "x", "input": 3, "output": "y"}], r"record 0: field 'input' must be a string"),
        (["not a record"], r"record 0: expected a JSON object"),
    ],
)
def test_invalid_records_name_index_and_field(records, match):
    with pytest.raises(ValueError, match=match):
        validate_records(records)


def test_empty_answer_is_an_error(model, tokenizer):
    with pytest.raises(ValueError, match=r"record 1: field 'output' has no tokens"):
        ifd_scores(model, tokenizer, [RECORDS[0], {"instruction": "x", "input": "", "output": ""}])


SCORES = [0.5, 1.2, 0.9, 0.9, 0.3, 1.0, float("nan"), 0.7, 2.0, 0.1]


def test_select_drops_above_one_then_top_fraction_by_ceil():
    records = [{"id": i} for i in range(len(SCORES))]
    chosen = select_by_ifd(records, SCORES, keep=0.3)  # ceil(0.3 * 10) = 3 of the 7 finite scores <= 1
    assert [r["id"] for r in chosen] == [5, 2, 3]  # 1.0, then the 0.9 tie in record order
    assert [r["ifd"] for r in chosen] == [1.0, 0.9, 0.9]
    assert "ifd" not in records[5]  # copies, inputs untouched
    assert [r["id"] for r in select_by_ifd(records, SCORES, keep=0.25)] == [5, 2, 3]  # ceil(2.5) = 3
    assert [r["id"] for r in select_by_ifd(records, SCORES, keep=0.01)] == [5]  # at least one kept
    assert [r["id"] for r in select_by_ifd(records, SCORES, keep=1.0)] == [5, 2, 3, 7, 0, 4, 9]  # capped
    assert [r["id"] for r in select_by_ifd(records, SCORES, keep=0.2, drop_above_one=False)] == [8, 1]
    assert select_by_ifd(records, SCORES, keep=0.1, score_key=None) == [records[5]]


def test_select_accepts_score_dicts_and_can_keep_nothing():
    records = [{"id": 0}, {"id": 1}]
    assert select_by_ifd(records, [{"ifd": 1.5}, {"ifd": 0.2}], keep=0.5) == [{"id": 1, "ifd": 0.2}]
    assert select_by_ifd(records, [1.5, 3.0], keep=1.0) == []


@pytest.mark.parametrize("keep", [0, 0.0, -0.1, 1.01, 2, float("nan"), True, "0.5"])
def test_keep_outside_unit_interval_is_an_error(keep):
    with pytest.raises(ValueError, match="keep must be a fraction in"):
        select_by_ifd([{"id": 0}], [0.5], keep=keep)


def test_write_selected_is_atomic_and_spares_the_input(tmp_path):
    source = tmp_path / "in.json"
    source.write_text("[]")
    out = tmp_path / "out.json"
    write_selected(out, [{"instruction": "é", "ifd": 0.5}], source=source)
    assert json.loads(out.read_text(encoding="utf-8")) == [{"instruction": "é", "ifd": 0.5}]
    with pytest.raises(ValueError, match="refusing to overwrite the input file"):
        write_selected(source, [], source=source)
    assert source.read_text() == "[]"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.json", "out.json"]  # no temp file left


def alpaca_records(n):
    """`n` generated Alpaca records, every third with an input."""
    words = ["apple", "river", "stone", "cloud", "green", "seven", "quiet", "paper"]
    return [
        {
            "instruction": f"Describe the {words[i % 8]} in {i % 5 + 1} words.",
            "input": f"The {words[(i + 3) % 8]} is near." if i % 3 == 0 else "",
            "output": " ".join(words[(i + j) % 8] for j in range(i % 5 + 1)) + ".",
        }
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def saved_model(tokenizer, model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ifd_model")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def run_cli(saved_model, data, out, *extra):
    return main(["ifd", "--model", str(saved_model), "--data", str(data), "--out", str(out), *extra])


def test_cli_selects_and_summarises(saved_model, model, tokenizer, tmp_path, capsys):
    records = alpaca_records(23)
    data = tmp_path / "alpaca.json"
    data.write_text(json.dumps(records))
    out, scores_out = tmp_path / "selected.json", tmp_path / "scores.jsonl"
    assert run_cli(saved_model, data, out, "--keep", "0.2", "--batch-size", "5", "--scores-out", str(scores_out)) == 0
    scores = [json.loads(line) for line in scores_out.read_text().splitlines()]
    assert [s["index"] for s in scores] == list(range(23))
    expected = ifd_scores(model, tokenizer, records)
    assert [s["ifd"] for s in scores] == pytest.approx([s["ifd"] for s in expected], rel=1e-5)
    selected = json.loads(out.read_text())
    dropped = sum(s["ifd"] > 1 for s in scores)
    assert len(selected) == min(math.ceil(0.2 * 23), 23 - dropped)
    assert [r["ifd"] for r in selected] == sorted((r["ifd"] for r in selected), reverse=True)
    assert all(r["ifd"] <= 1 for r in selected)
    for r in selected:
        assert {k: r[k] for k in ("instruction", "input", "output")} in records
    printed = capsys.readouterr().out
    assert "records scored: 23" in printed
    assert f"dropped (IFD > 1): {dropped}" in printed
    assert f"kept: {len(selected)}" in printed


def test_cli_limit_and_user_errors(saved_model, tmp_path, capsys):
    data = tmp_path / "alpaca.json"
    data.write_text(json.dumps(alpaca_records(10)))
    out = tmp_path / "selected.json"
    assert run_cli(saved_model, data, out, "--limit", "4", "--keep", "1") == 0
    assert "records scored: 4" in capsys.readouterr().out
    assert run_cli(saved_model, data, out, "--keep", "0") == 2
    assert "--keep must be in (0, 1]" in capsys.readouterr().err
    before = data.read_text()
    assert run_cli(saved_model, data, data) == 2
    assert "refusing to overwrite the input file" in capsys.readouterr().err
    assert data.read_text() == before
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"instruction": "x", "input": ""}]))
    assert run_cli(saved_model, bad, out) == 2
    assert "record 0: missing field 'output'" in capsys.readouterr().err


def test_cli_refuses_a_max_length_that_cuts_the_prompts(saved_model, tokenizer, tmp_path, capsys):
    records = alpaca_records(10)
    data = tmp_path / "alpaca.json"
    data.write_text(json.dumps(records))
    out = tmp_path / "selected.json"
    assert run_cli(saved_model, data, out, "--max-length", "4") == 2
    err = capsys.readouterr().err
    assert "--max_length 4: the prompt of 10 of 10 records does not fit" in err and "--max_dropped" in err
    assert not out.exists()
    # Longer prompts for the first three: they do not fit, are dropped and counted, the rest is scored.
    longest = max(len(encode(tokenizer, format_prompt(r))) for r in records)
    for r in records[:3]:
        r["input"] = "The apple is near the river and the stone. " * 6
    data.write_text(json.dumps(records))
    max_length = str(longest + 8)
    assert run_cli(saved_model, data, out, "--max-length", max_length) == 2  # 3 of 10 > 0.1
    assert "the prompt of 3 of 10 records does not fit" in capsys.readouterr().err
    scores_out = tmp_path / "scores.jsonl"
    extra = ("--max-dropped", "0.3", "--keep", "1", "--scores-out", str(scores_out))
    assert run_cli(saved_model, data, out, "--max-length", max_length, *extra) == 0
    printed = capsys.readouterr().out
    assert "records scored: 7 of 10" in printed
    assert "dropped (prompt does not fit in --max_length): 3" in printed
    scores = [json.loads(line) for line in scores_out.read_text().splitlines()]
    assert [s["ifd"] is None for s in scores] == [True] * 3 + [False] * 7
    assert all(r["ifd"] is not None for r in json.loads(out.read_text()))


def test_cli_refuses_an_empty_record_list_as_empty(saved_model, tmp_path, capsys):
    data = tmp_path / "empty.json"
    data.write_text("[]")
    assert run_cli(saved_model, data, tmp_path / "out.json") == 2
    assert "the record list is empty" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_on_real_alpaca(shared_data, tmp_path, capsys):
    path = shared_data / "alpaca_5000.json"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    records = load_alpaca(path, limit=50)
    tok = train_bpe_tokenizer([format_prompt(r) + r["output"] for r in records], vocab_size=400)
    torch.manual_seed(0)
    lm = LlmsysLlamaForCausalLM(LlmsysLlamaConfig(**tiny_config(tok, max_position_embeddings=512)))
    folder = tmp_path / "model"
    lm.save_pretrained(folder)
    tok.save_pretrained(folder)
    out = tmp_path / "selected.json"
    assert run_cli(folder, path, out, "--limit", "50", "--keep", "0.1", "--batch-size", "8") == 0
    assert "records scored: 50" in capsys.readouterr().out
    selected = json.loads(out.read_text())
    assert 1 <= len(selected) <= 5
    assert all(0 < r["ifd"] <= 1 for r in selected)
