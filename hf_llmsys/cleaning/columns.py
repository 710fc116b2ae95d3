"""The hidden columns both cleaning engines add to the documents, and replacing columns of an Arrow table.

Every document carries, next to the input's own columns, its input position (``INDEX``: the order decisions
follow), its detected language (``LANG``, "" until a step sets it) and the rule that dropped it (``DROP``, "" while
it lives; ``MISSING`` for a row whose text is null). The ``datasets`` engine (`pipeline.py`) and the Ray engine
(`engine_ray.py`, `ray_corpus.py`) read and write the same names; both remove them before returning.
"""

from __future__ import annotations

from typing import Any

INDEX, LANG, DROP = "__llmsys_index", "__llmsys_lang", "__llmsys_drop"
MISSING = "input.missing"
HIDDEN = (INDEX, LANG, DROP)


def replace_columns(table, columns: dict[str, Any]):
    """The pyarrow table with these columns replaced (same names, same positions, same types)."""
    import pyarrow as pa

    for name, values in columns.items():
        position = table.schema.get_field_index(name)
        field = table.schema.field(position)
        array = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values, field.type)
        table = table.set_column(position, field, array)
    return table
