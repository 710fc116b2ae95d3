"""C4's line dedup (TFDS remove_duplicate_text) against a transcription of TFDS's code; the c4 recipe; langid."""

from __future__ import annotations

import hashlib
import random

import pytest
from datasets import Dataset

from hf_llmsys.cleaning import RECIPES, STEPS, clean
from hf_llmsys.cleaning.base import Document
from hf_llmsys.cleaning.c4_line_dedup import C4LineDedup, line_feature, sentences_in_join
from hf_llmsys.cleaning.language import BACKENDS, LanguageFilter, identify
from hf_llmsys.cleaning.text import split_sentences

LINES = [
    "The river rises in the hills and runs to the sea.",
    "the river rises in the hills and runs to the sea.  ",
    "Boats carry grain to the port every week. Traders meet them there!",
    "A line with no end mark",
    "Is this a question? It is. And so on.",
    "",
    "   ",
    "Another plain line without an ending",
    "Short one.",
]


def tfds_remove_duplicate_text(texts: list[str], min_num_sentences: int = 3) -> list[str | None]:
    """TFDS c4_utils.remove_duplicate_text transcribed (MD5 of the stripped, lower-cased line; _remove_lines_from_text),
    with one change, our stated order rule: a line is kept by the first page (input order) instead of the page whose
    URL has the smallest MD5; and split_sentences for nltk's punkt. None: page dropped."""
    hash_text = lambda t: hashlib.md5(t.encode("utf-8")).hexdigest()  # noqa: E731
    owner: dict[str, int] = {}
    for page, text in enumerate(texts):
        for line in text.split("\n"):
            owner.setdefault(hash_text(line.strip().lower()), page)
    out = []
    for page, text in enumerate(texts):
        lines_to_keep = {h for h, p in owner.items() if p == page}
        new_lines, hashed_lines = [], set()
        for line in text.split("\n"):
            hashed_line = hash_text(line.strip().lower())
            if hashed_line not in lines_to_keep or hashed_line in hashed_lines:
                continue
            new_lines.append(line)
            hashed_lines.add(hashed_line)
        new_text = "\n".join(new_lines)
        if not new_text or (min_num_sentences and len(split_sentences(new_text)) < min_num_sentences):
            out.append(None)
        else:
            out.append(new_text)
    return out


def _random_pages(seed: int, n: int = 40) -> list[str]:
    rng = random.Random(seed)
    vocabulary = LINES + [f"Fact number {k} is new. It ends here. Truly." for k in range(60)]
    return ["\n".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 7))) for _ in range(n)]


def _run_step(step, texts):
    result = clean(Dataset.from_dict({"text": texts, "id": list(range(len(texts)))}), [step])
    kept = dict(zip(result.dataset["id"], result.dataset["text"], strict=True))
    return [kept.get(i) for i in range(len(texts))], result.report


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sentence_count_from_features_equals_split_sentences_of_the_join(seed):
    rng = random.Random(seed)
    for _ in range(200):
        lines = [rng.choice(LINES + ['Ends with a quote."', "...", "x"]) for _ in range(rng.randint(0, 6))]
        assert sentences_in_join([line_feature(line) for line in lines]) == len(split_sentences("\n".join(lines)))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("min_sentences", [0, 3])
def test_line_dedup_equals_tfds_transcription(seed, min_sentences):
    pages = _random_pages(seed)
    expected = tfds_remove_duplicate_text(pages, min_sentences)
    got, report = _run_step(C4LineDedup(min_sentences=min_sentences), pages)
    assert got == expected
    assert report.documents_out == sum(t is not None for t in expected)
    assert any(t is None for t in expected) and any(
        t is not None and t != p for t, p in zip(expected, pages, strict=True)
    )


def test_streaming_decisions_equal_batch_decisions():
    pages = _random_pages(5)
    step = C4LineDedup()
    features = step.features(pages)
    batch = step.decide(features)
    decider = step.streaming_decider()
    stream = [decider(f) for f in features]
    as_plain = lambda d: d.lines if hasattr(d, "lines") else d  # noqa: E731
    assert [as_plain(d) for d in batch] == [as_plain(d) for d in stream]


def test_a_page_of_one_repeated_line_is_dropped_by_the_c4_recipe():
    line = "This is a perfectly good sentence that ends with a full stop."
    repeated = "\n".join([line] * 60)  # 60 sentences for the page filter, 1 after line dedup
    prose = (
        "The history of the city is long and varied. Its first settlers came by boat.\n"
        "They built houses with stone from the hills. The town grew into a market for wool.\n"
        "Today the old quarter is a place that visitors love to explore with their friends."
    )
    ds = Dataset.from_dict({"text": [repeated, prose]})
    result = clean(ds, "c4")
    assert result.report.dropped["c4_lines.too_few_sentences"] == 1
    assert result.dataset["text"] == [prose]
    steps = [s["step"] for s in result.report.steps]
    assert steps.index("c4") < steps.index("c4_lines") < steps.index("language")  # TFDS's order
    assert "c4_spans" in STEPS and "c4_spans" not in [s["step"] for s in RECIPES["c4"]]


def test_a_line_shared_by_two_pages_stays_in_the_first_only():
    shared = "Shared Line About The Weather Today."
    first = f"{shared}\nOne. Two. Three."
    second = f"  {shared.lower()}  \nFour. Five. Six."  # same line after strip + lower
    got, report = _run_step(C4LineDedup(), [first, second])
    assert got == [first, "Four. Five. Six."]
    assert report.documents_out == 2


def test_empty_page_rule_and_parameter_check():
    got, report = _run_step(C4LineDedup(min_sentences=0), ["A. B. C.", "a. b. c."])
    assert got == ["A. B. C.", None] and report.dropped["c4_lines.empty"] == 1
    with pytest.raises(ValueError, match="min_sentences"):
        C4LineDedup(min_sentences=-1)


def test_langid_backend_is_selectable_per_step():
    assert set(BACKENDS) == {"langdetect", "langid"}
    english = "The library opened its doors to the public in the spring of that year, with ten thousand books."
    french = "Le gouvernement a présenté son budget pour l'année prochaine devant le parlement réuni."
    chinese = "中共中央总书记、国家主席江泽民发表新年讲话，向全国各族人民致以祝贺。"
    for backend in BACKENDS:
        assert identify(english, backend=backend)[0] == "en"
        assert identify(french, backend=backend)[0] == "fr"
        assert identify(chinese, backend=backend)[0] == "zh"
        assert identify("12345 !!! ###", backend=backend) == (None, 0.0)
    step = LanguageFilter(languages=["en"], min_score=0.9, backend="langid")
    doc = Document(english)
    assert step.apply(doc) is None and doc.language == "en"
    assert step.apply(Document(french)) == "language.other"
    assert step.config()["backend"] == "langid"
    with pytest.raises(ValueError, match="backend.*choose one of"):
        LanguageFilter(backend="cld3")
