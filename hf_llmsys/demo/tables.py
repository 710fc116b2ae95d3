"""Tables as a reader sees them: floats shown to 4 significant digits, the exact values kept underneath.

A ``gr.Dataframe`` given a pandas ``Styler`` displays the Styler's formatted strings (``display_value``) while
its data, and so what gradio_client receives, stays the full-precision numbers.
"""

from __future__ import annotations

import math

import pandas as pd

SIGNIFICANT_DIGITS = 4


def format_number(value) -> str:
    """4 significant digits (``23.46``, ``0.0001234``, ``1.2e+05``); NaN / None as an empty cell."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:.{SIGNIFICANT_DIGITS}g}"


def readable(table: pd.DataFrame):
    """A Styler of `table` showing its float columns with `format_number` (other columns unchanged)."""
    floats = [c for c in table.columns if pd.api.types.is_float_dtype(table[c])]
    return table.style.format(format_number, subset=floats) if floats else table.style


def readable_outputs(result):
    """An event's return value with every DataFrame (alone or in a tuple) replaced by its `readable` Styler."""
    if isinstance(result, pd.DataFrame):
        return readable(result)
    if isinstance(result, tuple):
        return tuple(readable(r) if isinstance(r, pd.DataFrame) else r for r in result)
    return result
