"""Every snippet a user copies from README.md and docs/*.md runs, and every relative link resolves.

A page's runnable blocks run in document order in one temporary folder (the working directory) and one Python
namespace, as a reader following the page would run them (mktestdocs' idea, without its dependency):

- a ```python block is executed;
- a ```bash block whose every command starts with ``llmsys`` runs each command through ``hf_llmsys.cli.main`` in
  this process (exit status 0 expected; continuation lines joined); other bash blocks (set-up, torchrun, scripts)
  are shown, not run;
- the line ``<!-- slow -->`` right before a block moves it to the slow suite (the page's slow test runs every block;
  its default test skips the slow ones, so a page keeps its cheap blocks independent of its slow ones);
- the line ``<!-- no-run: reason -->`` right before a block never runs it (a GPU, the real Hub): at most a quarter
  of all python blocks may carry it.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"^<!--\s*(slow|no-run:\s*(?P<reason>.+?))\s*-->\s*$")
# benchmarks whose scripts do not write through scripts/bench/results_files.py yet
NOT_YET_WRITTEN_BY_RESULTS_FILES = ()
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    marker: str | None  # "slow", "no-run" or None

    @property
    def llmsys_commands(self) -> list[str] | None:
        """The commands of a bash block if every one starts with ``llmsys``, else None (shown, not run)."""
        if self.language != "bash":
            return None
        joined = re.sub(r"\\\n\s*", " ", self.code)
        commands = [line.split(" #", 1)[0].strip() for line in joined.splitlines()]
        commands = [c for c in commands if c and not c.startswith("#")]
        if not commands or not all(c.startswith("llmsys ") or c == "llmsys" for c in commands):
            return None
        return commands


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of a markdown page with the marker line right before each."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        start, language = i, match.group(1)
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        marker = MARKER.match(lines[start - 1]) if start else None
        kind = None if marker is None else ("slow" if marker.group(1) == "slow" else "no-run")
        found.append(Block(page, start + 1, language, "\n".join(body) + "\n", kind))
        i += 1
    return found


def runnable(block: Block) -> bool:
    return block.marker != "no-run" and (block.language == "python" or block.llmsys_commands is not None)


def page_cases() -> list:
    cases = []
    for page in PAGES:
        mine = [b for b in blocks(page) if runnable(b)]
        if not mine:
            continue
        name = page.relative_to(REPO).as_posix()
        if any(b.marker != "slow" for b in mine):
            cases.append(pytest.param(page, False, id=name))
        if any(b.marker == "slow" for b in mine):
            cases.append(pytest.param(page, True, id=f"{name}-slow", marks=pytest.mark.slow))
    return cases


def run_llmsys(command: str, where: str) -> None:
    from hf_llmsys.cli import main

    argv = shlex.split(command)[1:]
    try:
        status = main(argv)
    except SystemExit as done:  # argparse's --help
        status = done.code or 0
    assert status == 0, f"{where}: `{command}` exited with {status}"


@pytest.mark.parametrize(("page", "with_slow"), page_cases())
def test_page_snippets_run_in_order(page: Path, with_slow: bool, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["snippet"])
    namespace: dict = {"__name__": "__snippet__"}
    for block in blocks(page):
        if not runnable(block) or (block.marker == "slow" and not with_slow):
            continue
        where = f"{page.relative_to(REPO)}:{block.line}"
        if block.language == "python":
            exec(compile(block.code, where, "exec"), namespace)  # noqa: S102  (the page's own code)
        else:
            for command in block.llmsys_commands:
                run_llmsys(command, where)


def test_at_most_a_quarter_of_python_blocks_are_not_run():
    python = [b for page in PAGES for b in blocks(page) if b.language == "python"]
    skipped = [f"{b.page.name}:{b.line}" for b in python if b.marker == "no-run"]
    assert python, "no python blocks found"
    assert len(skipped) * 4 <= len(python), f"{len(skipped)} of {len(python)} python blocks are no-run: {skipped}"


def test_markers_stand_right_before_a_block():
    """A marker followed by anything but a fence would silently do nothing."""
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if MARKER.match(line):
                assert i + 1 < len(lines) and FENCE.match(lines[i + 1]), f"{page.name}:{i + 1}: marker before no block"


def slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    inside, found = False, set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            inside = not inside
        elif not inside and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def test_relative_links_resolve():
    broken = []
    for page in PAGES:
        text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_readme_performance_table_is_the_generated_one():
    sys.path.insert(0, str(REPO / "scripts" / "bench"))
    import results_files

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert results_files.readme_with_table(readme, results_files.readme_table()) == readme, (
        "the README's performance block differs from benchmarks/results: run "
        "`python scripts/bench/results_files.py --readme README.md`"
    )


def test_benchmark_tables_are_generated_from_their_json(tmp_path):
    """Each benchmarks/results/*.md is what results_files renders from its JSON now."""
    sys.path.insert(0, str(REPO / "scripts" / "bench"))
    import json

    import results_files

    for path in sorted((REPO / "benchmarks" / "results").glob("*.json")):
        if path.stem.startswith(NOT_YET_WRITTEN_BY_RESULTS_FILES):
            continue
        results = json.loads(path.read_text(encoding="utf-8"))
        assert "table" in results, f"{path.name}: not written by scripts/bench/results_files.py"
        expected = results_files.markdown(results, path.name)
        assert path.with_suffix(".md").read_text(encoding="utf-8") == expected, f"{path.name}: regenerate its table"


def test_docs_site_builds_strict(tmp_path):
    """mkdocs.yml's nav names every page and every page's internal references resolve (mkdocs --strict)."""
    pytest.importorskip("mkdocs", reason="mkdocs is in the dev extra: pip install -e '.[dev]'")
    import subprocess

    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f",
                           str(REPO / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
