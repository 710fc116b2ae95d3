"""Named configurations ("presets") kept as data: a table per architecture, one ``from_preset`` for all.

A table maps a preset name to config fields plus information that is not a config field (``PRESET_INFO_KEYS``):
``published_params`` (the parameter count the source states), ``params_tolerance`` (the relative difference
allowed between our count and that figure, with the reason in the table's comments) and ``source`` (paper and
table, or the released config). ``tests/test_presets.py`` builds every preset on the meta device and checks the
count against the published size.
"""

from __future__ import annotations

PRESET_INFO_KEYS = ("published_params", "params_tolerance", "source")


def preset_fields(table: dict[str, dict], name: str, family: str) -> dict:
    """The config fields of preset ``name`` of ``table`` (information keys dropped); ValueError when unknown."""
    if name not in table:
        raise ValueError(f"unknown {family} preset {name!r}; choose one of {sorted(table)}.")
    return {key: value for key, value in table[name].items() if key not in PRESET_INFO_KEYS}


class PresetMixin:
    """Gives a config class ``from_preset(name, **overrides)`` over its class attribute ``presets``."""

    presets: dict[str, dict] = {}
    preset_family: str = ""

    @classmethod
    def from_preset(cls, name: str, **overrides):
        """The config of preset ``name`` of ``cls.presets``, with ``overrides`` applied on top."""
        return cls(**{**preset_fields(cls.presets, name, cls.preset_family), **overrides})
