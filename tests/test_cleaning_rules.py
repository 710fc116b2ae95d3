"""Each cleaning rule on crafted documents just inside and just outside its threshold."""

from __future__ import annotations

import math

import pytest

from hf_llmsys.cleaning.base import Document
from hf_llmsys.cleaning.c4 import C4Filter
from hf_llmsys.cleaning.fineweb import FineWebQuality
from hf_llmsys.cleaning.gopher import GopherQuality, GopherRepetition, duplicated_ngram_chars, top_ngram_chars
from hf_llmsys.cleaning.heuristics import LengthFilter, NoisyTextFilter
from hf_llmsys.cleaning.html import HtmlStrip
from hf_llmsys.cleaning.language import LanguageFilter, identify
from hf_llmsys.cleaning.normalize import Lowercase, UnicodeNormalize, WhitespaceClean
from hf_llmsys.cleaning.text import split_sentences, split_words

ZH = "我爱北京天安门"  # jieba: 我 / 爱 / 北京 / 天安门
PROSE = (
    "The history of the city is long and varied. Its first settlers arrived by boat from the south, and they "
    "built houses with stone taken from the hills. Over the centuries the town grew into a market for wool, "
    "grain and fish, and it became known for the quality of the cloth that its weavers made for the courts "
    "of Europe. Today the old quarter is a place that visitors love to explore with friends."
)


def run(step, text: str, language: str | None = None) -> tuple[str | None, str]:
    """(rule or None, rewritten text) of one document step."""
    doc = Document(text, 0, language)
    return step.apply(doc), doc.text


def kept(step, text, language=None) -> bool:
    return run(step, text, language)[0] is None


# --------------------------------------------------------------------------------------------- transforms


def test_nfkc_folds_full_width_and_ligatures():
    assert run(UnicodeNormalize(), "ＡＢＣ１２３，ﬁne")[1] == "ABC123,fine"
    assert run(UnicodeNormalize("NFC"), "ＡＢＣ")[1] == "ＡＢＣ"


def test_whitespace_removes_controls_and_folds_space_but_keeps_paragraphs():
    text = "a\t\t b\r\nc\x00d\u200b e\u3000f\n\n\n\n g \x07"
    assert run(WhitespaceClean(), text)[1] == "a b\ncd e f\n\ng"
    assert run(WhitespaceClean(max_blank_lines=0), "a\n\n\nb")[1] == "a\nb"


def test_lowercase():
    assert run(Lowercase(), "Hello WORLD")[1] == "hello world"


def test_html_strip_uses_a_parser():
    html = (
        "<html><head><title>T</title><style>p {color: red}</style></head><body><script>var x = 1;</script>"
        "<h1>Title</h1><p>Fish &amp; chips<br>are <b>good</b>.</p><!-- hidden --><ul><li>one</li><li>two</li></ul>"
    )
    _, text = run(HtmlStrip(), html)
    lines = [line for line in text.split("\n") if line]
    assert lines == ["Title", "Fish & chips", "are good.", "one", "two"]
    assert kept(HtmlStrip(), "x") and run(HtmlStrip(), "if a < b and c > d then")[1] == "if a < b and c > d then"


# ------------------------------------------------------------------------------------------------- length


def test_length_min_and_max_chars():
    step = LengthFilter(min_chars=10, max_chars=12)
    assert kept(step, "x" * 10) and kept(step, "x" * 12)
    assert run(step, "x" * 9)[0] == "length.too_short"
    assert run(step, "x" * 13)[0] == "length.too_long"
    assert run(step, "  \n ")[0] == "length.empty"
    assert run(LengthFilter(), "")[0] == "length.empty"


def test_length_min_words_english_and_chinese():
    assert kept(LengthFilter(min_words=3), "one two three")
    assert run(LengthFilter(min_words=3), "one two")[0] == "length.too_few_words"
    # Chinese is segmented (4 words), not whitespace-split (1 "word")
    assert split_words(ZH, "zh") == ["我", "爱", "北京", "天安门"] and len(ZH.split()) == 1
    assert kept(LengthFilter(min_words=4), ZH, "zh")
    assert run(LengthFilter(min_words=5), ZH, "zh")[0] == "length.too_few_words"
    assert kept(LengthFilter(min_words=4), ZH)  # language guessed from the script


# ------------------------------------------------------------------------------------------------ language


def test_language_identifies_english_and_chinese():
    step = LanguageFilter(languages=["en", "zh"])
    doc = Document("The committee approved the new budget after a long debate about schools and roads.")
    assert step.apply(doc) is None and doc.language == "en"
    doc = Document("中共中央总书记、国家主席江泽民发表新年讲话，向全国各族人民致以祝贺。")
    assert step.apply(doc) is None and doc.language == "zh"
    assert run(step, "Le gouvernement a présenté son budget pour l'année prochaine devant le parlement.")[0] == (
        "language.other"
    )
    assert run(step, "12345 678 -- 90")[0] == "language.undetected"


def test_language_min_score_threshold():
    text = "This is English text with some words mixed in: der Hund und die Katze schlafen."
    code, score = identify(text)
    assert code == "en" and 0.5 < score <= 1.0
    assert kept(LanguageFilter(["en"], min_score=score), text)
    assert run(LanguageFilter(["en"], min_score=math.nextafter(score, 2.0)), text)[0] == "language.low_score"


# --------------------------------------------------------------------------------------------------- noise


def test_noise_symbol_ratio():
    step = NoisyTextFilter(max_symbol_ratio=0.25)
    assert kept(step, "abcdefghijklmno" + "!?#%&")  # 5 / 20 = 0.25
    assert run(step, "abcdefghijklmn" + "!?#%&(")[0] == "noise.symbol_ratio"  # 6 / 20
    # CJK punctuation counts like ASCII punctuation; ideographs are not symbols
    assert kept(step, "我爱北京天安门，" * 3) and run(step, "我爱北京，，，，")[0] == "noise.symbol_ratio"


def test_noise_digit_ratio():
    step = NoisyTextFilter(max_digit_ratio=0.25)
    assert kept(step, "abcdefghijklmno 12345")  # 5 / 20
    assert run(step, "abcdefghijklmn 123456")[0] == "noise.digit_ratio"


def test_noise_repeated_character_run():
    step = NoisyTextFilter(max_symbol_ratio=1.0, max_char_run=20)
    assert kept(step, "wow " + "!" * 20 + " ok")
    assert run(step, "wow " + "!" * 21 + " ok")[0] == "noise.char_run"
    assert run(step, "哈" * 21)[0] == "noise.char_run"


# ------------------------------------------------------------------------------------------------------ C4


def _c4_page(n_sentences=3, extra=""):
    lines = [f"This is sentence number {i} of the page." for i in range(n_sentences)]
    return "\n".join(lines) + extra


def test_c4_min_sentences():
    step = C4Filter()  # TFDS: 3 sentences, 5 words per line
    assert kept(step, _c4_page(3))
    assert run(step, _c4_page(2))[0] == "c4.too_few_sentences"
    assert split_sentences("One here. Two there! Three? Four") == ["One here.", "Two there!", "Three?", "Four"]


def test_c4_line_rules_rewrite_the_page():
    page = "\n".join(
        [
            "Five words end with period.",  # kept: exactly 5 words
            "Four words with period.",  # removed: 4 words
            "This line has no terminal mark at all",  # removed
            "This line trails off into an ellipsis...",  # removed
            "Please enable JavaScript to view this page properly.",  # removed
            "By using this site you accept our privacy policy today.",  # removed
            "Wikipedia says so clearly in this line.[1] It really does.[citation needed]",  # citations removed
            "A long word " + "x" * 1000 + " is allowed in this line.",  # 1,000 characters: kept
            "A long word " + "y" * 1001 + " is not allowed in this line.",  # removed
        ]
    )
    rule, text = run(C4Filter(), page)
    assert rule is None
    assert text.split("\n") == [
        "Five words end with period.",
        "Wikipedia says so clearly in this line. It really does.",
        "A long word " + "x" * 1000 + " is allowed in this line.",
    ]


def test_c4_page_drops():
    assert run(C4Filter(), _c4_page(3, "\nLorem ipsum dolor sit amet, consectetur."))[0] == "c4.lorem_ipsum"
    assert run(C4Filter(), _c4_page(3, "\nThe function body { return x; } is here."))[0] == "c4.curly_bracket"
    # as in TFDS, a brace on a line already removed (too short) does not drop the page
    assert kept(C4Filter(), _c4_page(3, "\n{ x }."))


def test_c4_min_words_per_line_and_datatrove_settings():
    three = "\n".join(f"Three words {i}." for i in range(5))
    assert run(C4Filter(), three)[0] == "c4.too_few_sentences"
    assert kept(C4Filter(min_words_per_line=3, min_sentences=5), three)
    assert run(C4Filter(min_words_per_line=3, min_sentences=6), three)[0] == "c4.too_few_sentences"


def test_c4_skips_other_languages():
    assert run(C4Filter(), "中文文本没有英文句号", "zh") == (None, "中文文本没有英文句号")


# -------------------------------------------------------------------------------------------------- Gopher


def _words_doc(content: list[str]) -> str:
    return " ".join(content)


def _base_words(n: int, word: str = "word") -> list[str]:
    return ["the", "and"] + [word] * (n - 2)


def isolated_quality(**enabled) -> GopherQuality:
    """GopherQuality with every rule off except those given."""
    off = dict(
        min_words=None, max_words=None, min_mean_word_length=None, max_mean_word_length=None,
        max_symbol_word_ratio=None, max_bullet_lines_ratio=None, max_ellipsis_lines_ratio=None,
        min_alpha_words_ratio=None, min_stop_words=None,
    )  # fmt: skip
    return GopherQuality(**(off | enabled))


def test_gopher_word_count_bounds_default():
    step = GopherQuality()
    assert kept(step, _words_doc(_base_words(50)) + ".")
    assert run(step, _words_doc(_base_words(49)) + ".")[0] == "gopher_quality.too_few_words"
    step = GopherQuality(max_words=60)
    assert kept(step, _words_doc(_base_words(60)))
    assert run(step, _words_doc(_base_words(61)))[0] == "gopher_quality.too_many_words"


def test_gopher_symbol_tokens_are_not_words():
    assert run(GopherQuality(), _words_doc(_base_words(49)) + " -- ... !!")[0] == "gopher_quality.too_few_words"


def test_gopher_mean_word_length():
    low = ["the", "and"] + ["cat"] * 48  # mean 3.0
    assert kept(isolated_quality(min_mean_word_length=3), _words_doc(low))
    low[-1] = "at"  # mean 2.98
    assert run(isolated_quality(min_mean_word_length=3), _words_doc(low))[0] == "gopher_quality.mean_word_length_low"
    high = ["the", "and"] + ["abcdefghij"] * 46 + ["abcdefghijklmnopq"] * 2  # 500 chars / 50 words = 10.0
    assert kept(GopherQuality(), _words_doc(high))
    high[-1] += "r"  # 10.02
    assert run(GopherQuality(), _words_doc(high))[0] == "gopher_quality.mean_word_length_high"


def test_gopher_hash_and_ellipsis_ratios():
    # 50 words + k symbol tokens: k / (50 + k) <= 0.1  <=>  k <= 5
    assert kept(GopherQuality(), _words_doc(_base_words(50) + ["#"] * 5))
    assert run(GopherQuality(), _words_doc(_base_words(50) + ["#"] * 6))[0] == "gopher_quality.hash_ratio"
    words = _base_words(50)  # ellipses inside the line, so the ellipsis-lines rule stays out of it
    assert kept(GopherQuality(), _words_doc(words[:25] + ["…"] * 5 + words[25:]))
    assert run(GopherQuality(), _words_doc(words[:25] + ["…"] * 6 + words[25:]))[0] == "gopher_quality.ellipsis_ratio"


def test_gopher_bullet_and_ellipsis_lines():
    lines = [f"- item {i} with the and words" for i in range(18)] + ["plain line", "plain line two"]
    assert kept(isolated_quality(max_bullet_lines_ratio=0.9), "\n".join(lines))  # 18 / 20
    lines[-1] = "• bullet"
    assert run(isolated_quality(max_bullet_lines_ratio=0.9), "\n".join(lines))[0] == "gopher_quality.bullet_lines"
    lines = [f"line {i} ends..." for i in range(3)] + [f"line {i} ends." for i in range(7)]
    assert kept(isolated_quality(max_ellipsis_lines_ratio=0.3), "\n".join(lines))  # 3 / 10
    lines[3] = "line ends…"
    assert run(isolated_quality(max_ellipsis_lines_ratio=0.3), "\n".join(lines))[0] == "gopher_quality.ellipsis_lines"


def test_gopher_alpha_words():
    step = isolated_quality(min_alpha_words_ratio=0.8)
    assert kept(step, _words_doc(["word"] * 40 + ["1234"] * 10))  # 0.8
    assert run(step, _words_doc(["word"] * 39 + ["1234"] * 11))[0] == "gopher_quality.alpha_words"


def test_gopher_stop_words_case_insensitive():
    assert kept(isolated_quality(min_stop_words=2), "The cat AND the dog")
    assert run(isolated_quality(min_stop_words=2), "The cat or the dog")[0] == "gopher_quality.stop_words"


def test_gopher_quality_passes_prose_and_skips_chinese():
    assert kept(GopherQuality(), PROSE)
    assert kept(GopherQuality(), ZH * 3, "zh")


def test_repetition_helpers_by_hand():
    words = "a b a b a b c".split()
    assert top_ngram_chars(words, 2) == 3 * 3  # "a b" x 3
    # scan: (a b) new, (b a) new, (a b) repeat +2 jump to 4, (a b) repeat +2 jump to 6, end
    assert duplicated_ngram_chars(words, 2) == 4
    assert duplicated_ngram_chars("a b c a b c".split(), 3) == 3
    assert duplicated_ngram_chars("x y z".split(), 2) == 0


def _repetition_only(**enabled) -> GopherRepetition:
    off = dict(
        max_dup_line_frac=None, max_dup_para_frac=None, max_dup_line_char_frac=None, max_dup_para_char_frac=None,
        top_ngrams=[], dup_ngrams=[],
    )  # fmt: skip
    return GopherRepetition(**(off | enabled))


def test_repetition_duplicate_paragraph_and_line_fractions():
    paras = [f"paragraph {i}" for i in range(7)] + ["paragraph 0"] * 3  # 3 / 10 duplicates
    assert kept(_repetition_only(max_dup_para_frac=0.3), "\n\n".join(paras))
    paras[6] = "paragraph 0"  # 4 / 10
    assert run(_repetition_only(max_dup_para_frac=0.3), "\n\n".join(paras))[0] == "gopher_repetition.dup_para_frac"
    lines = [f"line {i}" for i in range(7)] + ["line 0"] * 3
    assert kept(_repetition_only(max_dup_line_frac=0.3), "\n".join(lines))
    lines[6] = "line 0"
    assert run(_repetition_only(max_dup_line_frac=0.3), "\n".join(lines))[0] == "gopher_repetition.dup_line_frac"


def test_repetition_duplicate_character_fractions():
    # text = P1 \n\n P2 \n\n P1: duplicated chars len(P1) = 10 over len(text) = 20 + len(P2) + 4
    p1 = "abcdefghij"
    inside = "\n\n".join([p1, "k" * 26, p1])  # 10 / 50 = 0.2
    outside = "\n\n".join([p1, "k" * 25, p1])  # 10 / 49
    assert kept(_repetition_only(max_dup_para_char_frac=0.2), inside)
    assert run(_repetition_only(max_dup_para_char_frac=0.2), outside)[0] == "gopher_repetition.dup_para_char_frac"
    inside, outside = "\n".join([p1, "k" * 28, p1]), "\n".join([p1, "k" * 27, p1])  # 10 / 50 and 10 / 49
    assert kept(_repetition_only(max_dup_line_char_frac=0.2), inside)
    assert run(_repetition_only(max_dup_line_char_frac=0.2), outside)[0] == "gopher_repetition.dup_line_char_frac"


@pytest.mark.parametrize("kind", ["top", "dup"])
def test_repetition_ngram_shares_at_the_threshold(kind):
    text = "one two three four five one two three four five six seven eight nine ten eleven"
    words = split_words(text)
    n = 2 if kind == "top" else 5
    chars = top_ngram_chars(words, n) if kind == "top" else duplicated_ngram_chars(words, n)
    share = chars / len(text)
    assert share > 0
    param = "top_ngrams" if kind == "top" else "dup_ngrams"
    assert kept(_repetition_only(**{param: [[n, share]]}), text)
    rule = run(_repetition_only(**{param: [[n, math.nextafter(share, 0)]]}), text)[0]
    assert rule == f"gopher_repetition.{kind}_{n}_gram"


def test_repetition_defaults_on_spam_and_prose():
    spam = " ".join(["buy cheap watches now"] * 30)
    assert run(GopherRepetition(), spam)[0] is not None
    assert kept(GopherRepetition(), PROSE)
    # Chinese n-grams are over jieba words, not one whitespace "word" per line
    assert run(GopherRepetition(), "我爱北京天安门。" * 20, "zh")[0] is not None
    zh_prose = (
        "中共中央总书记、国家主席江泽民发表新年讲话，向全国各族人民致以祝贺。过去的一年，我国改革开放和现代化建设"
        "取得了重大成就，国民经济保持了快速增长，人民生活水平继续提高。新的一年里，我们要继续努力，开创新局面。"
    )
    assert kept(GopherRepetition(), zh_prose, "zh")


# ------------------------------------------------------------------------------------------------- FineWeb


def _fineweb_only(**enabled) -> FineWebQuality:
    off = dict(min_line_punct_ratio=None, max_short_line_ratio=None, max_char_dup_ratio=None, max_newline_ratio=None)
    return FineWebQuality(**(off | enabled))


def test_fineweb_line_punct_ratio():
    lines = [f"this is a long enough line number {i} without an end" for i in range(25)]
    for i in range(3):
        lines[i] += "."  # 3 / 25 = 0.12
    assert kept(FineWebQuality(), "\n".join(lines))
    lines[2] = lines[2][:-1]  # 2 / 25
    assert run(FineWebQuality(), "\n".join(lines))[0] == "fineweb.line_punct_ratio"


def test_fineweb_short_line_ratio():
    short = [f"Short line {i}." for i in range(67)]
    long_ = [f"This is a much longer line, number {i}, with words." for i in range(33)]
    assert kept(_fineweb_only(max_short_line_ratio=0.67), "\n".join(short + long_))  # 67 / 100
    short.append("Short line 67.")
    assert run(_fineweb_only(max_short_line_ratio=0.67), "\n".join(short + long_[1:]))[0] == "fineweb.short_line_ratio"


def test_fineweb_char_dup_ratio():
    dup = "a" * 10
    inside = "\n".join(["b" * 980, dup, dup])  # 10 / 1000
    outside = "\n".join(["b" * 979, dup, dup])  # 10 / 999
    assert kept(_fineweb_only(max_char_dup_ratio=0.01), inside)
    assert run(_fineweb_only(max_char_dup_ratio=0.01), outside)[0] == "fineweb.char_dup_ratio"


def test_fineweb_list_ratio():
    inside = "one two three four five\nsix seven eight nine ten\nx\ny"  # 3 newlines / 12 words = 0.25
    assert kept(_fineweb_only(max_newline_ratio=0.25), inside)
    assert run(_fineweb_only(max_newline_ratio=0.25), inside + "\nz")[0] == "fineweb.list_ratio"  # 4 / 13


# ---------------------------------------------------------------------------------------- bad parameters


@pytest.mark.parametrize(
    "make, param",
    [
        (lambda: GopherQuality(max_bullet_lines_ratio=1.5), "max_bullet_lines_ratio"),
        (lambda: GopherQuality(min_words=-1), "min_words"),
        (lambda: NoisyTextFilter(max_symbol_ratio="high"), "max_symbol_ratio"),
        (lambda: LanguageFilter(min_score=2), "min_score"),
        (lambda: GopherRepetition(top_ngrams=[[2, 1.2]]), "top_ngrams[0].share"),
        (lambda: C4Filter(min_sentences=2.5), "min_sentences"),
        (lambda: UnicodeNormalize("NFX"), "form"),
        (lambda: FineWebQuality(short_line_length=0), "short_line_length"),
    ],
)
def test_bad_thresholds_name_step_parameter_and_range(make, param):
    with pytest.raises(ValueError, match=param.replace("[", r"\[").replace("]", r"\]")) as err:
        make()
    assert "step '" in str(err.value)
