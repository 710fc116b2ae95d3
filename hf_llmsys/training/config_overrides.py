"""`llmsys train --config_overrides`: any field of the chosen model type's config, set from the command line.

The text is transformers' ``run_clm.py --config_overrides`` convention, ``name=value`` pairs separated by commas,
with each value read as YAML so that lists and mappings work too:
``position_embedding_type=alibi,attention_layout=[dense,local],rope_parameters={rope_type: linear, factor: 2.0}``.
In a ``--config`` file it may be a mapping instead (``config_overrides: {position_embedding_type: alibi}``). The
pairs are applied last, over the values the job's flags give, when the config is built; a name the config class
does not have is a ValueError naming it and the closest fields, and a value the config refuses gets the config's
own error (the configs validate their fields).
"""

from __future__ import annotations

import dataclasses
import difflib

import yaml

FLAG = "--config_overrides"


def split_pairs(text: str) -> list[str]:
    """``a=1,b=[x,y],c={k: v}`` -> ``["a=1", "b=[x,y]", "c={k: v}"]``: commas inside brackets or braces stay."""
    pairs, depth, current = [], 0, []
    for char in text:
        depth += char in "[{"
        depth -= char in "]}"
        if char == "," and depth == 0:
            pairs.append("".join(current))
            current = []
        else:
            current.append(char)
    pairs.append("".join(current))
    return [pair.strip() for pair in pairs if pair.strip()]


def parse_value(text: str):
    """A value as YAML, except that a number is a number (YAML 1.1 reads ``1e-6`` as text)."""
    text = text.strip()
    for number in (int, float):
        try:
            return number(text)
        except ValueError:
            pass
    return yaml.safe_load(text) if text else None


def parse_overrides(overrides: str | dict | None) -> dict:
    """The name -> value pairs of `overrides` (text or a mapping; None: none)."""
    if overrides is None:
        return {}
    if isinstance(overrides, dict):
        return {str(name): value for name, value in overrides.items()}
    parsed = {}
    for pair in split_pairs(overrides):
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"{FLAG}: {pair!r} is not name=value (e.g. {FLAG} position_embedding_type=alibi)")
        try:
            parsed[name.strip()] = parse_value(value)
        except yaml.YAMLError as err:
            raise ValueError(f"{FLAG}: the value of {name.strip()} ({value!r}) is not valid: {err.problem}") from None
    return parsed


def config_field_names(config_class) -> set[str]:
    """The fields (and ``attribute_map`` aliases) of a config class."""
    fields = {f.name for f in dataclasses.fields(config_class)} if dataclasses.is_dataclass(config_class) else set()
    return fields | set(getattr(config_class, "attribute_map", {}))


def checked_overrides(overrides: str | dict | None, config_class, model_type: str) -> dict:
    """`parse_overrides`, every name checked against `config_class`."""
    parsed = parse_overrides(overrides)
    known = config_field_names(config_class)
    for name in parsed:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ValueError(f"{FLAG}: {name!r} is not a field of {model_type}'s config ({config_class.__name__})"
                             f"{hint} (docs/reference/config-fields.md lists them)")  # fmt: skip
    return parsed


def build_with_overrides(config_class, fields: dict, overrides: str | dict | None, model_type: str):
    """``config_class(**fields)`` with the --config_overrides pairs applied over `fields`."""
    return config_class(**(fields | checked_overrides(overrides, config_class, model_type)))
