"""``from_preset`` for every config class: its ``presets`` table (filled by the hf_llmsys package from
``hf_llmsys/presets.py``; empty in remote code, where a saved config needs none) with overrides on top."""

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
