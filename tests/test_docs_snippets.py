"""Every snippet a user copies from README.md and docs/ runs as written, and every link resolves.

A page's python and bash blocks run in document order in one temporary folder (the working directory, which holds
a link to the repository's ``scripts/`` so that ``python scripts/...`` runs as from the repository root) and one
Python namespace, as a reader following the page would run them (mktestdocs' idea, without its dependency):

- a ```python block is executed;
- a ```bash block whose every command starts with ``llmsys`` runs each command through ``hf_llmsys.cli.main`` in
  this process (exit status 0 expected; continuation lines joined), except ``llmsys demo``, which is started as a
  process, its page fetched, and stopped; any other bash block runs in ``bash -euo pipefail`` with the virtual
  environment's ``bin`` first on ``PATH``;
- the line ``<!-- slow -->`` right before a block moves it to the slow suite (the page's slow test runs every block;
  its default test skips the slow ones, so a page keeps its cheap blocks independent of its slow ones);
- the line ``<!-- no-run: reason -->`` right before a block never runs it (a GPU, the real Hub, the set-up of a
  machine): at most a quarter of all python and bash blocks may carry it.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"^<!--\s*(slow|no-run:\s*(?P<reason>.+?))\s*-->\s*$")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
DEMO_START_S = 600  # the demo loads SmolLM2 and starts its zoo's training before it serves the page


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    marker: str | None  # "slow", "no-run" or None

    @property
    def commands(self) -> list[str]:
        """The commands of a bash block, continuation lines joined, comments dropped."""
        joined = re.sub(r"\\\n\s*", " ", self.code)
        commands = [line.split(" #", 1)[0].strip() for line in joined.splitlines()]
        return [c for c in commands if c and not c.startswith("#")]

    @property
    def llmsys_commands(self) -> list[str] | None:
        """The commands of a bash block if every one starts with ``llmsys``, else None (run by bash)."""
        if self.language != "bash":
            return None
        commands = self.commands
        if not commands or not all(c.startswith("llmsys ") or c == "llmsys" for c in commands):
            return None
        return commands

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


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
    return block.marker != "no-run" and block.language in ("python", "bash")


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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def bin_path() -> str:
    return f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def run_demo(command: str, where: str) -> None:
    """`llmsys demo ...` as written, on a free port: started, its page fetched, stopped."""
    port = free_port()
    env = {**os.environ, "PATH": bin_path(), "GRADIO_SERVER_PORT": str(port), "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(shlex.split(command), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)  # fmt: skip
    try:
        deadline, address, seen = time.monotonic() + DEMO_START_S, None, []
        while address is None and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line and process.poll() is not None:
                break
            seen.append(line)
            if line.startswith("llmsys demo: http://"):
                address = line.split()[2]
        assert address is not None, f"{where}: `{command}` never served its page:\n{''.join(seen)[-3000:]}"
        assert address == f"http://127.0.0.1:{port}", address
        html = fetch_when_up(address, deadline)  # the address is printed as the server starts
        assert "gradio" in html.lower(), html[:500]
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def fetch_when_up(address: str, deadline: float) -> str:
    """The page at `address`, asked again while the server is still starting (connection refused) until
    `deadline`."""
    while True:
        try:
            with urllib.request.urlopen(address, timeout=60) as page:
                assert page.status == 200
                return page.read().decode("utf-8", "replace")
        except urllib.error.URLError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def run_llmsys(command: str, where: str) -> None:
    from hf_llmsys.cli import main

    argv = shlex.split(command)[1:]
    if argv[:1] == ["demo"]:
        run_demo(command, where)
        return
    try:
        status = main(argv)
    except SystemExit as done:  # argparse's --help
        status = done.code or 0
    assert status == 0, f"{where}: `{command}` exited with {status}"


def run_bash(block: Block) -> None:
    env = {**os.environ, "PATH": bin_path()}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.code], env=env, capture_output=True, text=True,
                          timeout=1800)  # fmt: skip
    assert done.returncode == 0, f"{block.where}: exited with {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}"


@pytest.mark.parametrize(("page", "with_slow"), page_cases())
def test_page_snippets_run_in_order(page: Path, with_slow: bool, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["snippet"])
    (tmp_path / "scripts").symlink_to(REPO / "scripts", target_is_directory=True)
    namespace: dict = {"__name__": "__snippet__"}
    for block in blocks(page):
        if not runnable(block) or (block.marker == "slow" and not with_slow):
            continue
        if block.language == "python":
            exec(compile(block.code, block.where, "exec"), namespace)  # noqa: S102  (the page's own code)
        elif block.llmsys_commands is not None:
            for command in block.llmsys_commands:
                run_llmsys(command, block.where)
        else:
            run_bash(block)


def all_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page) if b.language in ("python", "bash")]


def test_at_most_a_quarter_of_the_blocks_are_not_run():
    found = all_blocks()
    skipped = [b.where for b in found if b.marker == "no-run"]
    assert found, "no python or bash blocks found"
    assert len(skipped) * 4 <= len(found), f"{len(skipped)} of {len(found)} blocks are no-run: {skipped}"


def test_command_lines_are_bash_blocks_and_no_run_says_why():
    """A command a user runs is a ```bash block (so it runs here or says why not), never ```text or unlabelled."""
    for page in PAGES:
        for block in blocks(page):
            if block.language not in ("python", "bash"):
                first = block.code.lstrip().split("\n", 1)[0]
                assert not re.match(r"^(\$ )?(llmsys|python|bash|torchrun|accelerate|pip) ", first) or first.startswith(
                    "$ "
                ), f"{block.where}: a command in a ```{block.language} block; make it ```bash"
    for line in (line for page in PAGES for line in page.read_text(encoding="utf-8").splitlines()):
        match = MARKER.match(line)
        if match and match.group(1) != "slow":
            assert len(match.group("reason")) >= 10, f"no-run marker without a reason: {line}"


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


def page_links(page: Path) -> list[str]:
    """The relative link targets of a page, outside code blocks."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return [target for target in LINK.findall(text) if not re.match(r"^[a-z]+:", target)]


def test_relative_links_resolve():
    broken = []
    for page in PAGES:
        for target in page_links(page):
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_readme_performance_table_is_the_generated_one():
    from benchmarks import results_files

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert results_files.readme_with_table(readme, results_files.readme_table()) == readme, (
        "the README's performance block differs from benchmarks/results: run "
        "`python -m benchmarks.results_files --readme README.md`"
    )


def test_benchmark_tables_are_generated_from_their_json(tmp_path):
    """Each benchmarks/results/*.md is what results_files renders from its JSON now."""
    import json

    from benchmarks import results_files

    for path in sorted((REPO / "benchmarks" / "results").glob("*.json")):
        results = json.loads(path.read_text(encoding="utf-8"))
        assert "table" in results, f"{path.name}: not written by benchmarks/results_files.py"
        expected = results_files.markdown(results, path.name)
        assert path.with_suffix(".md").read_text(encoding="utf-8") == expected, f"{path.name}: regenerate its table"


def test_every_results_file_and_benchmark_a_page_names_exists():
    """A page that names ``benchmarks/results/NAME`` or ``benchmarks.NAME`` / ``benchmarks/NAME.py`` names a file
    that is there (issue 54 item 10: no page cites a run that was never recorded)."""
    missing = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for name in re.findall(r"benchmarks/results/([\w.-]+\.(?:json|md))", text):
            if not (REPO / "benchmarks" / "results" / name).is_file():
                missing.append(f"{page.relative_to(REPO)}: benchmarks/results/{name}")
        for name in re.findall(r"benchmarks[./](\w+)(?:\.py)?\b", text):
            if name != "results" and not (REPO / "benchmarks" / f"{name}.py").is_file():
                missing.append(f"{page.relative_to(REPO)}: benchmarks.{name}")
    assert not missing, "\n".join(missing)


def test_docs_site_builds_strict(tmp_path):
    """mkdocs.yml's nav names every page and every page's internal references resolve (mkdocs --strict)."""
    pytest.importorskip("mkdocs", reason="mkdocs is in the dev extra: pip install -e '.[dev]'")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f",
                           str(REPO / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    missing = [p.relative_to(REPO / "docs").as_posix() for p in REPO.glob("docs/**/*.md")]
    assert [p for p in missing if f": {p}" not in nav] == [], "pages not in mkdocs.yml's nav"
    assert "getting-started.md" in nav
