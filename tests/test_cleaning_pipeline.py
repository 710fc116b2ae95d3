"""The cleaning pipeline over datasets: recipes, counts, Dataset vs IterableDataset, num_proc, perplexity, analysis."""

from __future__ import annotations

import json
import math
import unicodedata
from pathlib import Path

import pytest
import torch
from datasets import Dataset

import hf_llmsys
from hf_llmsys import LlmsysLlamaConfig, LlmsysLlamaForCausalLM
from hf_llmsys.cleaning import RECIPES, STEPS, clean, load_recipe
from hf_llmsys.cleaning.analysis import AnalysisTransform, lemmatize, remove_stopwords, segment_chinese, stem, tokenize
from hf_llmsys.cleaning.perplexity_filter import PerplexityFilter
from hf_llmsys.cleaning.text import guess_language
from hf_llmsys.cli import main as llmsys
from hf_llmsys.data.tokenizer import train_bpe_tokenizer
from hf_llmsys.evaluation import corpus_perplexity

EN_PROSE = [
    "The history of the city is long and varied. Its first settlers arrived by boat from the south, and they built "
    "houses with stone taken from the hills. Over the centuries the town grew into a market for wool, grain and "
    "fish, and it became known for the quality of the cloth that its weavers made for the courts of Europe. Today "
    "the old quarter is a place that visitors love to explore with friends and family.",
    "Scientists have studied the behaviour of bees for many years. They found that the insects share information "
    "about food with a dance that tells the others where to fly and how far to go. This discovery changed the way "
    "that people think about animal communication, and it has led to new work on the minds of small creatures "
    "that live in large groups with complex rules.",
    "The library opened its doors to the public in the spring of that year. It held more than ten thousand books on "
    "subjects from history to engineering, and it offered a reading room that was warm in winter. Many of the "
    "students who studied there went on to become teachers, and they often said that the quiet hours in that room "
    "had shaped the rest of their lives.",
]
ZH_PROSE = (
    "中共中央总书记、国家主席江泽民发表新年讲话，向全国各族人民致以祝贺。过去的一年，我国改革开放和现代化建设取得了"
    "重大成就，国民经济保持了快速增长，人民生活水平继续提高。新的一年里，我们要继续努力，开创新的局面。"
)


def _corpus() -> Dataset:
    texts = EN_PROSE + [
        "<html><body><p>" + EN_PROSE[0].replace(". ", ".</p><p>") + "</p></body></html>",  # HTML copy of doc 0
        EN_PROSE[1].upper(),  # exact duplicate after normalisation
        ZH_PROSE,
        "",  # empty
        None,  # missing
        "!!!! ???? #### $$$$ %%%% &&&& **** ---- ;;;; ::::",  # noise
        "Le gouvernement a présenté son budget pour l'année prochaine devant le parlement réuni.",  # French
    ]
    return Dataset.from_dict({"text": texts, "id": list(range(len(texts))), "source": ["web"] * len(texts)})


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_builtin_recipes_count_every_document(recipe):
    ds = _corpus()
    result = clean(ds, recipe)
    report = result.report
    assert report.documents_in == len(ds)
    assert report.documents_in == report.documents_out + sum(report.dropped.values())
    assert report.documents_out == len(result.dataset)
    assert result.dataset.column_names == ["text", "id", "source"]
    assert report.characters_in == sum(len(t) for t in ds["text"] if t)
    assert report.characters_out == sum(len(t) for t in result.dataset["text"])
    assert report.dropped["input.missing"] == 1 and report.dropped["length.empty"] == 1
    assert report.dropped["language.other"] >= 1  # French
    assert [s["step"] for s in report.steps][-2:] == ["exact_dedup", "minhash"]
    kept_ids = set(result.dataset["id"])
    assert 4 not in kept_ids  # the upper-cased copy of doc 1
    assert not (0 in kept_ids and 3 in kept_ids)  # doc 0 and its HTML copy are one document after stripping


def test_gopher_recipe_keeps_english_and_chinese_prose():
    result = clean(_corpus(), "gopher")
    assert set(result.dataset["id"]) >= {0, 1, 2, 5}
    # NFKC folds the full-width comma (U+FF0C) to ","; the ideographic full stop stays
    assert result.dataset.filter(lambda r: r["id"] == 5)["text"][0] == unicodedata.normalize("NFKC", ZH_PROSE)


def test_report_examples_point_at_input_positions():
    result = clean(_corpus(), "gopher", max_examples=2)
    examples = result.report.to_dict()["drop_examples"]
    assert examples["input.missing"] == [{"index": 7, "text": ""}]
    assert examples["language.other"][0]["index"] == 9
    assert examples["language.other"][0]["text"].startswith("Le gouvernement")


def test_num_proc_and_streaming_give_the_same_result():
    ds = _corpus()
    one = clean(ds, "fineweb-like")
    two = clean(ds, "fineweb-like", num_proc=2, batch_size=3)
    stream = clean(ds.to_iterable_dataset(), "fineweb-like", batch_size=4)
    streamed = list(stream.dataset)
    assert one.dataset.to_list() == two.dataset.to_list() == streamed
    assert one.report.to_dict() == two.report.to_dict() == stream.report.to_dict()


def test_document_steps_run_in_order_and_transform():
    ds = Dataset.from_dict({"text": ["<b>ＨＥＬＬＯ</b>\t\tWorld"]})
    out = clean(ds, [{"step": "html"}, {"step": "normalize"}, {"step": "whitespace"}, {"step": "lowercase"}])
    assert out.dataset["text"] == ["hello world"]


# -------------------------------------------------------------------------------------------- recipes


def test_recipe_files_yaml_and_json(tmp_path):
    yaml_file = tmp_path / "mine.yaml"
    yaml_file.write_text("name: mine\nsteps:\n  - step: whitespace\n  - {step: length, min_chars: 20}\n")
    json_file = tmp_path / "mine.json"
    json_file.write_text(json.dumps([{"step": "whitespace"}, {"step": "length", "min_chars": 20}]))
    for path in (yaml_file, json_file):
        name, steps = load_recipe(str(path))
        assert [s.name for s in steps] == ["whitespace", "length"] and steps[1].min_chars == 20
    result = clean(Dataset.from_dict({"text": ["short", "x" * 20]}), str(yaml_file))
    assert result.report.recipe == "mine" and dict(result.report.dropped) == {"length.too_short": 1}


def test_recipe_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown step 'htm'; known steps: .*html.*minhash"):
        load_recipe([{"step": "htm"}])
    with pytest.raises(ValueError, match=r"step 'length': unknown parameter\(s\) \['min_char'\]"):
        load_recipe([{"step": "length", "min_char": 3}])
    with pytest.raises(ValueError, match=r"step 'gopher_quality': parameter 'max_bullet_lines_ratio' = 2 .*\[0, 1\]"):
        load_recipe([{"step": "gopher_quality", "max_bullet_lines_ratio": 2}])
    with pytest.raises(ValueError, match="unknown recipe 'c5'"):
        load_recipe("c5")
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps: [unclosed")
    with pytest.raises(ValueError, match="not valid YAML"):
        load_recipe(str(bad))
    assert set(STEPS) >= {"html", "normalize", "language", "c4", "gopher_quality", "fineweb", "minhash", "perplexity"}


def test_missing_text_field_is_a_clear_error():
    with pytest.raises(ValueError, match="no text field 'text'"):
        clean(Dataset.from_dict({"body": ["a"]}), "c4")
    with pytest.raises(ValueError, match="not text"):
        clean(Dataset.from_dict({"text": [1, 2]}), "c4")


# ------------------------------------------------------------------------------------------- perplexity


def build_tiny_lm():
    """A 1-layer llmsys_llama and a 300-token BPE tokenizer trained on the English prose (seeded)."""
    tokenizer = train_bpe_tokenizer(EN_PROSE * 5, vocab_size=300)
    torch.manual_seed(0)
    config = LlmsysLlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    )  # fmt: skip
    return LlmsysLlamaForCausalLM(config).eval(), tokenizer


@pytest.fixture(scope="module")
def tiny_lm():
    return build_tiny_lm()


def test_perplexity_filter_threshold_and_quantile(tiny_lm):
    model, tokenizer = tiny_lm
    texts = [EN_PROSE[0], "zq xv kj wp", EN_PROSE[1][:120], "aaaa bbbb cccc"]
    step = PerplexityFilter(model, tokenizer, max_perplexity=1e9)
    ppl = step.perplexities(texts)
    for text, value in zip(texts, ppl, strict=True):  # each equals the toolkit's corpus perplexity of that one text
        assert math.isclose(value, corpus_perplexity(model, tokenizer, [text]).ppl, rel_tol=1e-5)
    worst = max(range(4), key=lambda i: ppl[i])
    ds = Dataset.from_dict({"text": texts})
    at = clean(ds, [PerplexityFilter(model, tokenizer, max_perplexity=ppl[worst])])
    assert len(at.dataset) == 4
    below = clean(ds, [PerplexityFilter(model, tokenizer, max_perplexity=math.nextafter(ppl[worst], 0))])
    assert dict(below.report.dropped) == {"perplexity.above_threshold": 1}
    assert below.report.examples["perplexity.above_threshold"][0]["index"] == worst
    half = clean(ds, [PerplexityFilter(model, tokenizer, quantile=0.5)])
    assert sorted(half.dataset["text"]) == sorted(t for t, p in zip(texts, ppl, strict=True) if p <= sorted(ppl)[1])


def test_perplexity_filter_takes_any_causal_lm(tiny_lm):
    from transformers import GPT2Config, GPT2LMHeadModel

    _, tokenizer = tiny_lm
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=1, n_head=4, n_positions=64))
    step = PerplexityFilter(gpt2.eval(), tokenizer, max_perplexity=1e9)
    value = step.perplexities([EN_PROSE[0]])[0]  # longer than n_positions: sliding windows
    assert math.isclose(value, corpus_perplexity(gpt2, tokenizer, EN_PROSE[0]).ppl, rel_tol=1e-5)


def test_perplexity_filter_from_a_saved_folder_and_streaming_rules(tiny_lm, tmp_path):
    model, tokenizer = tiny_lm
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    step = PerplexityFilter(str(tmp_path), max_perplexity=1e9)
    text = EN_PROSE[2]
    assert math.isclose(step.perplexities([text])[0], corpus_perplexity(model, tokenizer, text).ppl, rel_tol=1e-5)
    ds = Dataset.from_dict({"text": [text]}).to_iterable_dataset()
    with pytest.raises(ValueError, match="quantile"):
        clean(ds, [{"step": "perplexity", "model": str(tmp_path), "quantile": 0.5}])
    with pytest.raises(ValueError, match="exactly one"):
        PerplexityFilter(str(tmp_path))
    # and from a recipe file through the command line
    src, recipe, out = tmp_path / "in.jsonl", tmp_path / "ppl.yaml", tmp_path / "out"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in EN_PROSE))
    worst = max(PerplexityFilter(model, tokenizer, max_perplexity=2).perplexities(EN_PROSE))
    recipe.write_text(f"steps:\n  - {{step: perplexity, model: {tmp_path}, max_perplexity: {worst * (1 - 1e-6)}}}\n")
    assert llmsys(["clean", "--input", str(src), "--output", str(out), "--recipe", str(recipe)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["dropped"] == {"perplexity.above_threshold": 1} and report["documents_out"] == 2
    with pytest.raises(ValueError, match="'quantile' = 1.5"):
        PerplexityFilter(str(tmp_path), quantile=1.5)


# ---------------------------------------------------------------------------------------------- analysis


def test_analysis_transforms():
    tokens = tokenize("The mice were running quickly, weren't they?", "en")
    assert tokens == ["The", "mice", "were", "running", "quickly", "weren't", "they"]
    assert remove_stopwords(tokens, "en") == ["mice", "running"]  # stopwords-iso's English list has "quickly"
    assert stem(["running", "generously", "cats"]) == ["run", "generous", "cat"]
    assert lemmatize(["mice", "running", "was"]) == ["mouse", "run", "be"]
    assert segment_chinese("我爱北京天安门") == ["我", "爱", "北京", "天安门"]
    assert AnalysisTransform()("我们爱北京天安门。") == ["爱", "北京", "天安门"]  # 我们 is a stopword
    assert AnalysisTransform(lemmatize=True)("The mice were running") == ["mouse", "run"]
    with pytest.raises(ValueError, match="not both"):
        AnalysisTransform(stem=True, lemmatize=True)


def test_analysis_adds_a_column_and_keeps_the_text():
    ds = Dataset.from_dict({"text": ["The cats are running to the market.", "我爱北京天安门"]})
    out = AnalysisTransform(stem=True).map(ds)
    assert out["text"] == ds["text"]
    assert out["tokens"] == [["cat", "run", "market"], ["爱", "北京", "天安门"]]


def test_analysis_is_not_a_cleaning_step():
    assert not {"stopwords", "stem", "lemmatize", "segment"} & set(STEPS)


def test_models_never_import_the_cleaning_package():
    models = Path(hf_llmsys.__file__).parent / "models"
    assert not [p.name for p in models.glob("*.py") if "cleaning" in p.read_text(encoding="utf-8")]


@pytest.mark.slow
@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_full_recipe_on_real_data_adds_up_and_is_deterministic(recipe, shared_data, tmp_path):
    wiki = (shared_data / "wikitext-2-valid.tokens").read_text(encoding="utf-8")
    news = (shared_data / "peoples_daily_1998_zh_part.txt").read_text(encoding="utf-8").splitlines()
    texts = [a for a in wiki.split("\n = ") if a.strip()] + ["\n".join(news[i : i + 8]) for i in range(0, 2000, 8)]
    ds = Dataset.from_dict({"text": texts})
    first, second = clean(ds, recipe, num_proc=2), clean(ds, recipe)
    report = first.report.to_dict()
    assert report["documents_in"] == len(texts) == report["documents_out"] + sum(report["dropped"].values())
    assert report == second.report.to_dict() and first.dataset["text"] == second.dataset["text"]
    if recipe != "c4":  # c4 keeps English only
        assert any(guess_language(t) == "zh" for t in first.dataset["text"])
    assert any(guess_language(t) == "en" for t in first.dataset["text"])
