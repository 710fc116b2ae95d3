"""Wall time of `llmsys --help` and of `llmsys <command> --help` for every registered command.

Each help runs in a fresh process through the installed console script (what a user types), `--repeats` times;
the median and every sample are recorded, with the load average before and after (the machine is shared: a
loaded machine shows up there, not silently in the figures), the commit measured and the Python version.

Results go under `--label` (e.g. "before" / "after") into the JSON file, keeping the other labels already there,
so one file holds both sides of a change; ``results_files.write`` adds the environment and the generated table
(the newest label against "before"). Goal: top-level help < 1 s, each command's help < 2 s.

    .venv/bin/python scripts/bench/cli_help.py --label after --json benchmarks/results/cli_help-cpu.json

The baseline of an older commit runs its dispatcher from an unpacked copy (``git archive <commit> | tar -x -C
DIR``; the interpreter finds that copy's hf_llmsys first in its working directory):

    .venv/bin/python scripts/bench/cli_help.py --label before --cwd DIR \
        --entry "$PWD/.venv/bin/python -c 'import sys; from hf_llmsys.cli import main; sys.exit(main())'" \
        --commands train ppl ifd clean sft card push pull verify demo --json benchmarks/results/cli_help-cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GOALS_S = {"top_level": 1.0, "command": 2.0}
sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_files  # noqa: E402  (scripts/bench/results_files.py)


def registered_commands() -> list[str]:
    """The subcommand names of `llmsys`, read from its registry (a light import: no torch)."""
    sys.path.insert(0, str(REPO))
    from hf_llmsys.cli import SUBCOMMANDS

    return list(SUBCOMMANDS)


def llmsys_executable() -> str:
    """The console script beside this interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).with_name("llmsys")
    found = str(beside) if beside.exists() else shutil.which("llmsys")
    if found is None:
        raise SystemExit("llmsys console script not found: pip install -e . first")
    return found


def time_once(argv: list[str], cwd: Path) -> tuple[float, int]:
    """(wall seconds, exit status) of one run, output discarded."""
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd, check=False)
    return time.perf_counter() - start, done.returncode


def measure(argv: list[str], repeats: int, cwd: Path) -> dict:
    """Median and samples of `repeats` timed runs of `argv`; the exit status of the last run."""
    samples, status = [], None
    for _ in range(repeats):
        seconds, status = time_once(argv, cwd)
        samples.append(round(seconds, 3))
    return {"median_s": round(statistics.median(samples), 3), "samples_s": samples, "exit_status": status}


def git_commit() -> str | None:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
    return done.stdout.strip() or None


def run(repeats: int, commands: list[str], entry: list[str], cwd: Path, commit: str | None) -> dict:
    """Every help timed, with the context needed to read the figures."""
    load_before = os.getloadavg()
    results = {"top_level": measure([*entry, "--help"], repeats, cwd)}
    for name in commands:
        results[name] = measure([*entry, name, "--help"], repeats, cwd)
        print(f"llmsys {name} --help: median {results[name]['median_s']} s", file=sys.stderr)
    return {
        "commit": commit,
        "entry": shlex.join(entry),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "repeats": repeats,
        "goals_s": GOALS_S,
        "help_s": results,
    }


def labelled_runs(results: dict) -> dict[str, dict]:
    """The runs of a results dict, by label (the keys that hold timings)."""
    return {label: run for label, run in results.items() if isinstance(run, dict) and "help_s" in run}


def results_table(results: dict) -> results_files.Table:
    """Median help time per command: the newest label ("after", else the last) against the "before..." run of the
    lowest load, where it measured that command."""
    runs = labelled_runs(results)
    ours_label = "after" if "after" in runs else list(runs)[-1]
    # the baseline measured at the lowest load: help times of the heavy import grow with the machine's load
    baselines = [label for label in runs if label.startswith("before")]
    before_label = min(baselines, key=lambda label: (runs[label].get("load_before") or [0])[0], default=None)
    ours, before = runs[ours_label], runs.get(before_label)
    rows = []
    for name, timing in ours["help_s"].items():
        peer = (before or {}).get("help_s", {}).get(name)
        shown = "llmsys --help" if name == "top_level" else f"llmsys {name} --help"
        rows.append(results_files.Row(
            shown, f"{timing['median_s']:.2f} s", "" if peer is None else f"{peer['median_s']:.2f} s",
            results_files.cost_ratio(timing["median_s"], peer and peer["median_s"]), headline=name == "top_level",
        ))  # fmt: skip
    notes = [f"{label}: commit {run.get('commit')}, {run.get('date')}, load before/after {run.get('load_before')} / "
             f"{run.get('load_after')}, median of {run.get('repeats')}" for label, run in runs.items()]  # fmt: skip
    notes.append(f"Goals: top-level help < {GOALS_S['top_level']} s, each command's < {GOALS_S['command']} s.")
    peer_name = f"{before_label} (commit {before.get('commit')})" if before else "before (not measured)"
    return results_files.Table(f"llmsys help, wall seconds ({ours_label})", peer_name, rows, notes)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default="current", help="key the results are stored under (default: current)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per help text; the median is reported")
    parser.add_argument("--json", type=Path, help="results file; other labels in it are kept")
    parser.add_argument("--commands", nargs="*", help="only these commands (default: every registered one)")
    parser.add_argument("--entry", help="command line that runs llmsys (default: the venv's console script)")
    parser.add_argument("--cwd", type=Path, default=REPO, help="working directory of each run (default: the repo)")
    parser.add_argument("--commit", help="the commit measured (default: this checkout's HEAD)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: give at least 1 run")
    entry = shlex.split(args.entry) if args.entry else [llmsys_executable()]
    commit = args.commit or (git_commit() if args.cwd == REPO else None)
    result = run(args.repeats, args.commands or registered_commands(), entry, args.cwd, commit)
    if args.json:
        existing = json.loads(args.json.read_text()) if args.json.exists() else {}
        runs = {label: run for label, run in existing.items() if label not in ("benchmark", "environment", "table")}
        runs[args.label] = result
        results_files.write(args.json, "cli_help", runs, results_table(runs), load_average=result["load_after"])
    print(json.dumps({name: r["median_s"] for name, r in result["help_s"].items()}, indent=2))
    return result


if __name__ == "__main__":
    main()
