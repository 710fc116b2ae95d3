"""The sliding-window plan as a pure function: coverage, maximal contexts, stride semantics, lm-eval's windows."""

from __future__ import annotations

import math

import pytest

from hf_llmsys.evaluation.window_planning import Window, plan_windows, resolve_stride

GRID = [(n, length, stride) for n in range(2, 42) for length in range(1, 11) for stride in range(1, length + 1)]


def _scored_positions(windows: list[Window]) -> list[int]:
    return [p for w in windows for p in range(w.score_from, w.end)]


def test_every_position_scored_exactly_once_in_order():
    for n, length, stride in GRID:
        windows = plan_windows(n, length, stride)
        assert _scored_positions(windows) == list(range(n - 1)), (n, length, stride)


def test_windows_fit_and_contexts_are_maximal():
    """Each window holds <= max_length tokens, starts at or before its first scored position, and is as long as
    max_length allows for where it ends: begin == max(0, end - max_length), the final partial window included."""
    for n, length, stride in GRID:
        for w in plan_windows(n, length, stride):
            assert 0 <= w.begin <= w.score_from < w.end <= n - 1
            assert w.length <= length
            assert w.begin == max(0, w.end - length), (n, length, stride, w)


def test_stride_semantics():
    """The first window scores min(max_length, n - 1) positions, each later one `stride` (the final one the rest),
    so there are 1 + ceil((n - 1 - max_length) / stride) windows; each later token sees >= max_length - stride + 1."""
    for n, length, stride in GRID:
        windows = plan_windows(n, length, stride)
        sizes = [w.scored for w in windows]
        assert sizes[0] == min(length, n - 1)
        assert all(size == stride for size in sizes[1:-1])
        assert 1 <= sizes[-1] <= (stride if len(windows) > 1 else length)
        assert len(windows) == 1 + max(0, math.ceil((n - 1 - length) / stride))
        for w in windows[1:]:
            assert w.score_from - w.begin + 1 >= length - stride + 1  # tokens seen by its first scored prediction


def test_disjoint_windows_restart_context_except_the_final_one():
    windows = plan_windows(21, 6, 6)
    assert [(w.begin, w.end, w.score_from) for w in windows] == [(0, 6, 0), (6, 12, 6), (12, 18, 12), (14, 20, 18)]
    for n, length in [(n, length) for n, length, stride in GRID if stride == length]:
        *full, last = plan_windows(n, length, length)
        assert all(w.begin == w.score_from for w in full)  # no overlap: the scored spans partition the text
        assert last.begin == max(0, n - 1 - length)  # the partial final window reaches back a whole window


def test_short_sequence_is_one_window_and_text_index_is_kept():
    assert plan_windows(5, 8, 4, text=3) == [Window(3, 0, 4, 0)]
    assert plan_windows(9, 8, 8) == [Window(0, 0, 8, 0)]  # exactly one full window: nothing left over


def test_matches_lm_eval_rolling_token_windows():
    """Our stride s is lm-eval's pred_len: get_rolling_token_windows(context_len = max_length - s + 1)."""
    lm_eval_utils = pytest.importorskip("lm_eval.utils", reason="lm-eval-harness is not installed")
    for n, length, stride in GRID:
        seq = list(range(n))  # token id == position; seq[0] is the prefix (bos) token
        theirs = lm_eval_utils.get_rolling_token_windows(seq[1:], seq[0], length, length - stride + 1)
        ours = [(seq[w.begin : w.end], seq[w.score_from + 1 : w.end + 1]) for w in plan_windows(n, length, stride)]
        assert ours == list(theirs), (n, length, stride)


@pytest.mark.parametrize(
    "args, match",
    [((1, 4, 2), "n_tokens=1"), ((10, 4, 5), "1 <= stride <= max_length"), ((10, 4, 0), "1 <= stride"),
     ((10, 0, 1), "max_length >= 1")],
)  # fmt: skip
def test_plan_rejects_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        plan_windows(*args)


def test_resolve_stride():
    assert resolve_stride(None, 9) == 4
    assert resolve_stride(9, 9) == 9
    for bad, match in [(0, "positive integer"), (True, "positive integer"), (2.0, "positive integer"),
                       (10, "stride=10 > max_length=9")]:  # fmt: skip
        with pytest.raises(ValueError, match=match):
            resolve_stride(bad, 9)
