"""Deliberate breakages (issue 12's table) and the tests that must catch them.

    python -m benchmarks.lib.breakages [--only NAME ...] [--json PATH] [--md PATH]
    make breakages

Each breakage is a small textual patch: (file, the exact text of the breakage site, what
replaces it). The tree is never touched: every breakage is applied to its own temporary copy
of the working tree (the files `git ls-files` lists, tracked or untracked, not ignored), and
the named tests run there with `PYTHONPATH` pointing at the copy. A site that no longer occurs
exactly once stops the script with a one-line error naming the file and the breakage, so a
refactoring re-points the patch instead of silently breaking nothing.

A control run of the same tests on an unbroken copy comes first: a breakage counts as caught
only when those tests pass unbroken and at least one fails broken, on every repeat (the lock
breakage is repeated: a race must be caught every time, not by luck). Writes JSON (default
`benchmarks/results/breakages.json`) and a markdown table beside it; exits 1 unless every
breakage is caught.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


@dataclass(frozen=True)
class Patch:
    """Replace `old` (which must occur exactly once in `path`) with `new`."""

    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Breakage:
    name: str
    what: str
    patches: tuple[Patch, ...]
    tests: tuple[str, ...]
    repeats: int = 1
    part_of: str = ""
    """The issue's table row this breakage (or part of one) reproduces."""


CHECKS = "llm_assets/assets/checks.py"
PLAN_FORCED = Patch(
    CHECKS,
    "return _result(plan_problems(request_plan, deduped))",
    "return _result([])",
)
ACCOUNTING_FORCED = Patch(
    CHECKS,
    "return _result(problems, **accounting(result))",
    "return _result([], **accounting(result))",
)
RAISE_REMOVED = Patch(
    "llm_assets/pipeline/send.py",
    "    raise_if_too_many_errors(outcome, options.max_error_rate)\n",
    "",
)
"""The one stage runner (`send_stage`) that the asset and the CLI path both call."""
CHECK_TESTS = (
    "tests/llm_assets/assets/test_checks.py",
    "tests/llm_assets/assets/test_check_wrappers.py",
)
ROW1 = "checks forced to pass, max_error_rate raise removed"

BREAKAGES: tuple[Breakage, ...] = (
    Breakage(
        "checks-and-raise",
        "plan_is_a_permutation and every_row_accounted_for forced to pass, the asset's "
        "max_error_rate raise removed (all three at once, as in the issue)",
        (PLAN_FORCED, ACCOUNTING_FORCED, RAISE_REMOVED),
        CHECK_TESTS,
        part_of=ROW1,
    ),
    Breakage(
        "plan-check-forced",
        "plan_is_a_permutation always passes",
        (PLAN_FORCED,),
        CHECK_TESTS,
        part_of=ROW1,
    ),
    Breakage(
        "accounting-check-forced",
        "every_row_accounted_for always passes",
        (ACCOUNTING_FORCED,),
        CHECK_TESTS,
        part_of=ROW1,
    ),
    Breakage(
        "asset-raise-removed",
        "send_stage no longer raises TooManyErrors over max_error_rate (the llm_outputs asset)",
        (RAISE_REMOVED,),
        CHECK_TESTS,
        part_of=ROW1,
    ),
    Breakage(
        "run-raise-removed",
        "send_stage no longer raises over max_error_rate (the CLI path, run_query)",
        (RAISE_REMOVED,),
        ("tests/llm_assets/pipeline/test_run_errors.py",),
        part_of=ROW1,
    ),
    Breakage(
        "run-lock-removed",
        "SimulatedEngine.run simulates without taking the engine's lock",
        (
            Patch(
                "resources/sim/engine.py",
                "        with self._lock:\n            responses, _, makespan, _ = self._simulate(",
                "        if True:\n            responses, _, makespan, _ = self._simulate(",
            ),
        ),
        ("tests/resources/sim/test_engine_threads.py",),
        repeats=5,
        part_of="the lock in SimulatedEngine.run removed",
    ),
    Breakage(
        "keep-long-reversed",
        "keep-long sorts running shortest first, so the longest is evicted",
        (
            Patch(
                "resources/sim/engine.py",
                "running.sort(key=_computed, reverse=True)",
                "running.sort(key=_computed, reverse=False)",
            ),
        ),
        ("tests/resources/sim",),
        part_of="keep-long preemption order reversed",
    ),
    Breakage(
        "all-reduce-deleted",
        "the tensor-parallel all-reduce term is never added to the per-token coefficient",
        (
            Patch(
                "resources/sim/cost_model.py",
                "    if tp > 1:\n        allreduce",
                "    if False:\n        allreduce",
            ),
        ),
        ("tests/resources/sim",),
        part_of="the tensor-parallel all-reduce term deleted",
    ),
)


def copy_tree(dest: Path) -> None:
    """Copy the working tree's files (tracked or untracked, not ignored) to `dest`."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        src = ROOT / rel
        if src.is_file() and not src.is_symlink():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def apply(patch: Patch, tree: Path, breakage: str) -> None:
    target = tree / patch.path
    text = target.read_text()
    count = text.count(patch.old)
    if count != 1:
        raise SystemExit(
            f"breakage {breakage!r}: the site {patch.old!r} occurs {count} times in "
            f"{patch.path} (expected once); re-point the patch in benchmarks/lib/breakages.py"
        )
    target.write_text(text.replace(patch.old, patch.new))


def run_tests(tree: Path, tests: tuple[str, ...]) -> dict:
    """Run pytest on `tests` inside `tree`; counts and failing test ids from its JUnit XML."""
    report = tree / ".breakage-junit.xml"
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    cmd += ["-o", "addopts=", f"--junitxml={report}", *tests]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if not report.exists():
        tail = (proc.stdout + proc.stderr)[-2000:]
        raise SystemExit(
            f"pytest wrote no report for {list(tests)} (exit {proc.returncode}):\n{tail}"
        )
    failing, counts = [], {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in ET.parse(report).getroot().iter("testsuite"):
        for key in counts:
            counts[key] += int(suite.get(key, 0))
    for case in ET.parse(report).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failing.append(f"{case.get('classname')}::{case.get('name')}")
    report.unlink()
    return {**counts, "exit": proc.returncode, "failing": failing, "seconds": round(seconds, 2)}


@dataclass
class Outcome:
    breakage: Breakage
    control: list[dict]
    """The same tests on an unbroken copy, as many times as the broken runs."""
    broken: list[dict] = field(default_factory=list)

    @property
    def caught(self) -> bool:
        control_ok = all(run["exit"] == 0 and not run["failing"] for run in self.control)
        return control_ok and all(run["failing"] for run in self.broken)

    def as_json(self) -> dict:
        b = self.breakage
        return {
            "name": b.name,
            "issue_row": b.part_of,
            "what": b.what,
            "patches": [vars(p) for p in b.patches],
            "tests": list(b.tests),
            "control": self.control,
            "broken_runs": self.broken,
            "caught": self.caught,
        }


def check(breakage: Breakage, controls: dict[tuple, list[dict]]) -> Outcome:
    key = (breakage.tests, breakage.repeats)
    if key not in controls:
        with tempfile.TemporaryDirectory(prefix="breakage-control-") as tmp:
            copy_tree(Path(tmp))
            controls[key] = [run_tests(Path(tmp), breakage.tests) for _ in range(breakage.repeats)]
    outcome = Outcome(breakage, controls[key])
    with tempfile.TemporaryDirectory(prefix=f"breakage-{breakage.name}-") as tmp:
        tree = Path(tmp)
        copy_tree(tree)
        for patch in breakage.patches:
            apply(patch, tree, breakage.name)
        for _ in range(breakage.repeats):
            outcome.broken.append(run_tests(tree, breakage.tests))
    return outcome


def markdown(outcomes: list[Outcome]) -> str:
    lines = [
        "# Deliberate breakages (issue 12)",
        "",
        "`python -m benchmarks.lib.breakages`: each breakage applied alone to a temporary copy "
        "of the tree; the control is the same tests on an unbroken copy.",
        "",
        "| breakage | tests | control: passed / run | broken: failed / run | caught |",
        "|---|---|---|---|---|",
    ]
    for o in outcomes:
        runs = ", ".join(f"{len(r['failing'])} / {r['tests']}" for r in o.broken)
        control = ", ".join(
            f"{r['tests'] - r['skipped'] - len(r['failing'])} / {r['tests']}" for r in o.control
        )
        tests = "<br>".join(o.breakage.tests)
        lines.append(
            f"| {o.breakage.name}: {o.breakage.what} | {tests} | {control} | {runs} | "
            f"{'yes' if o.caught else 'NO'} |"
        )
    lines.append("")
    for o in outcomes:
        first = next((r["failing"][0] for r in o.broken if r["failing"]), "none")
        lines.append(f"- {o.breakage.name}: first failing test `{first}`")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="breakage names (default: all)")
    parser.add_argument("--json", type=Path, default=RESULTS / "breakages.json")
    parser.add_argument("--md", type=Path, default=RESULTS / "breakages.md")
    args = parser.parse_args(argv)
    names = {b.name for b in BREAKAGES}
    unknown = set(args.only or ()) - names
    if unknown:
        parser.error(f"unknown breakage(s) {sorted(unknown)}; expected some of {sorted(names)}")
    chosen = [b for b in BREAKAGES if not args.only or b.name in args.only]
    controls: dict[tuple, list[dict]] = {}
    outcomes = []
    for breakage in chosen:
        outcome = check(breakage, controls)
        outcomes.append(outcome)
        runs = [len(r["failing"]) for r in outcome.broken]
        print(f"{breakage.name}: caught={outcome.caught} failing per run={runs}", flush=True)
    payload = {
        "command": "python -m benchmarks.lib.breakages"
        + (f" --only {' '.join(args.only)}" if args.only else ""),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "all_caught": all(o.caught for o in outcomes),
        "breakages": [o.as_json() for o in outcomes],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(payload, indent=2) + "\n")
    args.md.write_text(markdown(outcomes))
    print(f"wrote {args.json} and {args.md}")
    return 0 if payload["all_caught"] else 1


if __name__ == "__main__":
    sys.exit(main())
