"""The cleaning report: documents and characters in and out, and every drop counted under its rule."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

EXAMPLE_CHARS = 200


@dataclass
class CleaningReport:
    """Counts of one cleaning run; ``documents_in == documents_out + sum(dropped.values())`` when complete."""

    recipe: str = "custom"
    steps: list[dict] = field(default_factory=list)
    documents_in: int = 0
    documents_out: int = 0
    characters_in: int = 0
    characters_out: int = 0
    dropped: Counter = field(default_factory=Counter)
    examples: dict[str, list[dict]] = field(default_factory=dict)
    max_examples: int = 3

    def add_drop(self, rule: str, index: int, text: str | None) -> None:
        """Count one dropped document (input position `index`) under `rule`; keep the first few as examples."""
        self.dropped[rule] += 1
        shown = self.examples.setdefault(rule, [])
        if len(shown) < self.max_examples:
            shown.append({"index": int(index), "text": (text or "")[:EXAMPLE_CHARS]})

    def check_totals(self) -> None:
        """Raise if the counts do not add up (an internal error, never a user one)."""
        total = self.documents_out + sum(self.dropped.values())
        assert total == self.documents_in, f"report does not add up: {self.documents_in} in, {total} out + dropped"

    def to_dict(self) -> dict:
        """JSON-ready: dropped maps rule -> count (sorted by rule), drop_examples maps rule -> examples."""
        rules = sorted(self.dropped)
        return {
            "recipe": self.recipe,
            "documents_in": self.documents_in,
            "documents_out": self.documents_out,
            "characters_in": self.characters_in,
            "characters_out": self.characters_out,
            "dropped": {rule: self.dropped[rule] for rule in rules},
            "drop_examples": {rule: sorted(self.examples.get(rule, []), key=lambda e: e["index"]) for rule in rules},
            "steps": self.steps,
        }

    def table(self) -> str:
        """A plain-text table: one row per rule (count and share of the input), then the totals."""
        n_in = max(self.documents_in, 1)
        rows = [(rule, self.dropped[rule]) for rule in sorted(self.dropped, key=lambda r: (-self.dropped[r], r))]
        width = max([len(r) for r, _ in rows] + [len("documents out"), 14])
        lines = [f"{'rule':<{width}}  {'dropped':>10}  {'% of input':>10}", "-" * (width + 24)]
        lines += [f"{rule:<{width}}  {count:>10,}  {100 * count / n_in:>9.2f}%" for rule, count in rows]
        lines.append("-" * (width + 24))
        lines.append(f"{'documents in':<{width}}  {self.documents_in:>10,}")
        lines.append(f"{'documents out':<{width}}  {self.documents_out:>10,}  {100 * self.documents_out / n_in:>9.2f}%")
        chars_share = 100 * self.characters_out / max(self.characters_in, 1)
        lines.append(f"{'characters in':<{width}}  {self.characters_in:>10,}")
        lines.append(f"{'characters out':<{width}}  {self.characters_out:>10,}  {chars_share:>9.2f}%")
        return "\n".join(lines)
