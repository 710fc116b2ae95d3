"""Which `llmsys train` flags apply to which `--model_type`: a flag that does not apply is refused, never dropped.

A job's flags that apply to some model types only have a row each (`FlagScope`, the table is
`pretrain_arguments.FLAG_SCOPES`): the config attribute it sets (a field or an `attribute_map` alias of each of the
config classes of the types it applies to: `declared_config_fields_exist`, and a test that builds each config and
reads the attribute back). Which model types take it, and a type's own default for it, are that type's row of the
architecture registry (``hf_llmsys/architectures.py``: ``training_flags``, ``training_flag_defaults``, e.g.
``intermediate_size``: GPT-3's None = its 4d MLP, where the LLaMA default job uses 384), read when checked.

`apply_model_type_flags` runs once, before anything is read or written: a flag given on the command line (from
Python: set to a non-default value) that does not apply to the chosen model type is a ValueError naming the flag,
the model type and the types it applies to; then the per-type defaults of the flags not given are filled in.
(HfArgumentParser hands every key of a field's metadata to argparse, so the scopes live in a table, not there.)
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .. import architectures

_UNSET = object()


@dataclass(frozen=True)
class FlagScope:
    """A flag's row: its name, the config field it sets (None: read by the job) and whether it applies to every
    model type (`every_type`) or only to those whose registry row lists it in ``training_flags``."""

    flag: str
    config_field: str | None = None
    every_type: bool = False

    @property
    def model_types(self) -> tuple[str, ...] | None:
        """The model types this flag applies to, in registry order (None: every type)."""
        if self.every_type:
            return None
        rows = architectures.ARCHITECTURES.values()
        return tuple(row.model_type for row in rows if self.flag in row.training_flags)


def flag_scopes(*scopes: FlagScope) -> dict[str, FlagScope]:
    """flag name -> its row."""
    return {scope.flag: scope for scope in scopes}


def flags_given(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> frozenset[str]:
    """The destinations (dataclass field names) `argv` sets explicitly, whatever its spelling.

    argparse fills a default only into namespace attributes that are missing, so a namespace pre-filled with a
    sentinel keeps the sentinel exactly where no flag was given (``--x=1``, ``--no_x``, dash spellings included).
    """
    dests = {action.dest for action in parser._actions if action.dest != argparse.SUPPRESS}
    namespace = argparse.Namespace(**dict.fromkeys(dests, _UNSET))
    parsed, _ = parser.parse_known_args(args=list(argv or []), namespace=namespace)
    return frozenset(name for name, value in vars(parsed).items() if value is not _UNSET)


def non_default_fields(arguments: Iterable) -> frozenset[str]:
    """For dataclasses built in Python (no argv): the fields whose value differs from their default."""
    names = set()
    for args in arguments:
        for f in dataclasses.fields(args):
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if f.init and getattr(args, f.name) != default:
                names.add(f.name)
    return frozenset(names)


def check_flags_apply(model_type: str, given: Iterable[str], scopes: Mapping[str, FlagScope]) -> None:
    """A ValueError for the first given flag (in table order) that does not apply to `model_type`."""
    for name, scope in scopes.items():
        if name in given and scope.model_types is not None and model_type not in scope.model_types:
            raise ValueError(
                f"--{name} does not apply to --model_type {model_type} (only to {', '.join(scope.model_types)}); "
                "drop it or choose one of those model types"
            )


def fill_model_type_defaults(model_type: str, arguments: Iterable, given: Iterable[str]) -> None:
    """Set each flag that was not given to the model type's own default, where its registry row declares one."""
    defaults = architectures.architecture(model_type, "--model_type").training_flag_defaults
    for args in arguments:
        for name in {f.name for f in dataclasses.fields(args)} - set(given):
            if name in defaults:
                setattr(args, name, defaults[name])


def apply_model_type_flags(
    model_type: str, arguments: Sequence, scopes: Mapping[str, FlagScope], given: Iterable[str] | None = None
) -> None:
    """Refuse flags that do not apply to `model_type`, then fill its per-type defaults (see the module docstring)."""
    given = non_default_fields(arguments) if given is None else frozenset(given)
    check_flags_apply(model_type, given, scopes)
    fill_model_type_defaults(model_type, arguments, given)


def config_knows(model_type: str, name: str) -> bool:
    """Whether `model_type`'s config class has the attribute `name` (a field or an `attribute_map` alias)."""
    config_class = architectures.architecture(model_type).config_class
    fields = {f.name for f in dataclasses.fields(config_class)} if dataclasses.is_dataclass(config_class) else set()
    return name in fields or name in getattr(config_class, "attribute_map", {})


def declared_config_fields_exist(
    scopes: Mapping[str, FlagScope], model_types: Iterable[str] | None = None
) -> list[str]:
    """``--flag -> type.field`` for each declared config field a config class does not know: should be none
    (`model_types`: those a flag of every type is checked on; None: every registered type)."""
    model_types = tuple(architectures.ARCHITECTURES if model_types is None else model_types)
    return [
        f"--{name} -> {model_type}.{scope.config_field}"
        for name, scope in scopes.items()
        if scope.config_field
        for model_type in scope.model_types or model_types
        if not config_knows(model_type, scope.config_field)
    ]
