"""Which commit and command produced each committed result, and whether its figures still hold.

Every `benchmarks/results/<name>.json` carries top-level `commit` (the HEAD it ran at),
`dirty` (whether the work tree had uncommitted changes: then the figures belong to the commit
that recorded the file, which is taken to hold the code it ran) and `command`. `write_result`
stamps them; results recorded before it existed were stamped once with the commit that
recorded the file (`commit_note` says so).

A result is **current** when no commit after it changed the code it measures (`MEASURES`),
leaving out the commits of `BEHAVIOUR_PRESERVING` (each with the check that showed it changes
no output). Otherwise it must say `stale` (why, and what would regenerate it) in its JSON and
in every README or docs line quoting it: `tests/benchmarks/test_provenance.py` holds both.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"

_SIM = ("resources/sim",)
_OPENAI = ("resources/openai", "resources/runner.py", "resources/response_cache.py")
_PIPELINE = ("llm_assets/pipeline", "llm_assets/optimizer", "llm_assets/query", "llm_assets/sql")
_LLAMA = (*_OPENAI, *_PIPELINE, "resources/llama_cpp", "benchmarks/llama_cpp.py")
_LLAMA_SIM = (*_LLAMA, "benchmarks/lib/llama_cpp_measure.py", "benchmarks/lib/llama_cpp_pair.py")
_GPU = ("resources/sim/cost_model.py", "resources/sim/profiles.py", "resources/vllm_engine.py",
        "benchmarks/gpu_validation.py")  # fmt: skip

MEASURES: Mapping[str, tuple[str, ...]] = {
    "breakages": ("benchmarks/lib/breakages.py", "tests"),
    "client_throughput": (
        *_OPENAI,
        "benchmarks/client_throughput.py",
        "benchmarks/lib/client_report.py",
    ),
    "faults": (
        *_OPENAI,
        *_SIM,
        "llm_assets/data",
        "resources/warehouse/store.py",
        "benchmarks/faults.py",
        "benchmarks/lib/faults.py",
        "benchmarks/lib/fault_setup.py",
        "benchmarks/lib/hostile.py",
        "benchmarks/lib/hostile_faults.py",
        "benchmarks/lib/kill9.py",
        "benchmarks/lib/input_faults.py",
        "benchmarks/lib/concurrent_runs.py",
    ),  # fmt: skip
    "faults_concurrent": (
        "llm_assets",
        "resources/warehouse/store.py",
        "resources/warehouse/slots.py",
        "resources/warehouse/liveness.py",
        "benchmarks/lib/concurrent_runs.py",
        "benchmarks/lib/postgres.py",
    ),  # fmt: skip
    "faults_bounded_input": (
        "llm_assets/data",
        "llm_assets/cli",
        "benchmarks/lib/bounded_input.py",
    ),
    "fidelity": (*_SIM, "benchmarks/fidelity.py"),
    "fleet": (
        *_OPENAI,
        *_SIM,
        "benchmarks/fleet.py",
        "benchmarks/lib/fleet_bench.py",
        "benchmarks/lib/fleet_tables.py",
        "benchmarks/lib/vllm_router.py",
    ),  # fmt: skip
    "gpu_validation": (
        "resources/sim/cost_model.py",
        "resources/sim/profiles.py",
        "resources/vllm_engine.py",
        "benchmarks/gpu_validation.py",
    ),  # fmt: skip
    "gpu_validation_repeat": (
        "resources/sim/cost_model.py",
        "resources/sim/profiles.py",
        "resources/vllm_engine.py",
        "benchmarks/gpu_validation.py",
    ),  # fmt: skip
    "launch_speed": ("llm_assets", "jobs", "benchmarks/launch_speed.py"),
    "llama_cpp": (
        *_LLAMA,
        "benchmarks/lib/llama_cpp_measure.py",
        "benchmarks/lib/llama_cpp_pair.py",
    ),
    "llama_cpp_wide": (
        *_LLAMA,
        "benchmarks/lib/llama_cpp_measure.py",
        "benchmarks/lib/llama_cpp_pair.py",
    ),  # fmt: skip
    "llama_cpp_real": (*_LLAMA, "benchmarks/lib/llama_cpp_real.py"),
    "loader": ("llm_assets/data", *_PIPELINE, "llm_assets/cli", "benchmarks/loader.py"),
    "mutation": ("llm_assets", "resources", "tests", "benchmarks/mutation.py"),
    "plan_accuracy": (*_PIPELINE, *_SIM, "benchmarks/plan_accuracy.py"),
    "quality": (
        *_LLAMA,
        "benchmarks/quality.py",
        "benchmarks/lib/quality_runs.py",
        "benchmarks/lib/quality_metrics.py",
    ),  # fmt: skip
    "queries": ("llm_assets", *_SIM, "benchmarks/queries.py", "benchmarks/lib/ladder.py"),
    "queries_h200": ("llm_assets", *_SIM, "benchmarks/queries.py", "benchmarks/lib/ladder.py"),
    "ray_blocks": (
        *_OPENAI,
        *_SIM,
        "resources/ray_executor",
        "benchmarks/ray_blocks.py",
        "benchmarks/lib/ray_bench.py",
        "benchmarks/lib/fleet_bench.py",
        "benchmarks/lib/fleet_tables.py",
    ),  # fmt: skip
    "reorder": (
        "llm_assets/optimizer",
        "benchmarks/reorder.py",
        "benchmarks/lib/quickgreedy.py",
        "benchmarks/lib/shapes.py",
        "benchmarks/lib/tokens.py",
    ),  # fmt: skip
    "reorder_budget": (
        "llm_assets/optimizer",
        "resources/sim/block_cache.py",
        "benchmarks/reorder.py",
        "benchmarks/lib/tokens.py",
    ),  # fmt: skip
    "safety_net": ("llm_assets/optimizer", "benchmarks/safety_net.py"),
    "scheduler": (
        *_SIM,
        "benchmarks/scheduler.py",
        "benchmarks/scheduler_report.py",
        "benchmarks/lib/workload.py",
        "benchmarks/lib/relquery_waves.py",
    ),  # fmt: skip
    "semantic_join": (*_PIPELINE, "benchmarks/semantic_join.py", "benchmarks/lib/join_orders.py"),
    "sharded_plan": (
        "llm_assets/optimizer",
        "resources/ray_executor/planning.py",
        "resources/ray_executor/executor.py",
        "benchmarks/sharded_plan.py",
        "benchmarks/lib/sharded_bench.py",
        "benchmarks/loader.py",
    ),  # fmt: skip
    "sim_server_blocking": ("resources/sim/server", "benchmarks/sim_server_blocking.py"),
    "sim_speed": (*_SIM, "benchmarks/sim_speed.py"),
    "vllm_conformance": (*_SIM, "benchmarks/vllm_conformance.py", "benchmarks/lib/conformance.py"),
}
"""The code each result measures (paths from the repository root; a folder means all in it)."""

BEHAVIOUR_PRESERVING: Mapping[str, str] = {
    "16257fd": "modules moved into packages; benchmarks/results/restructure_check.md: the tree "
    "equals the old one with module names rewritten, plus the hand edits it lists",
    "73a3c5c": "the OpenAI engine hands ClientSettings down instead of itself: the same "
    "attributes read from the config, the same calls (tests/resources unchanged and green)",
    "47f0542": "structured_outputs_for and number_regex moved verbatim to a leaf module",
    "6b0a717": "as_arrow moved verbatim to pipeline/connection.py",
    "20d920d": "the fault benchmarks' shared setup moved verbatim to benchmarks/lib/fault_setup.py",
    "ec05c11": "resources/ray_executor/__init__.py: its docstring only (git show ec05c11)",
    "9025483": "benchmarks/client_throughput.py: its markdown moved to "
    "benchmarks/lib/client_report.py; the measured rows' code unchanged (git show 9025483)",
    "e5ee866": "RELQUERY_HEADER, the same string, defined once in resources/engine.py "
    "(git show e5ee866)",
    "ae437ba": "fleet tables moved to benchmarks/lib/fleet_tables.py: the six tables plan the same "
    "requests (sha256 of ids, prompts and max_tokens at 60 rows, before and after)",
    "b6dcca4": "sharded planning added beside the old path: new modules (optimizer/shards.py, "
    "optimizer/passes/sharded.py, ray_executor/planning.py) and QueryOptions.num_plan_shards, "
    "whose default 1 runs plan_stage's unchanged `optimize` call (git show b6dcca4 -- "
    "llm_assets/pipeline/plan.py); --shards defaults to that default",
    "4a77d98": "the planner's tokenizer handed over as engine.token_encoder instead of the bound "
    "token_ids: the same ids (tests/resources/test_token_encoder.py)",
    "d79afaf": "benchmarks/queries.py: the charts' file names only "
    "(git show d79afaf -- benchmarks/queries.py)",
}
"""Commits shown to change no output (short hash -> the check that showed it)."""


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def command_line() -> str:
    """How this process was started, as `python -m benchmarks.<name> ...`."""
    argv = list(getattr(sys, "orig_argv", sys.argv))
    return shlex.join(["python", *argv[1:]])


@functools.cache
def _started_at() -> tuple[str, bool]:
    """HEAD and whether the work tree was dirty, read once: at the first call, which
    `benchmarks.lib.provenance` makes when it is imported (a benchmark's start), so a commit
    made while a benchmark runs is not taken for the code it ran."""
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return git("rev-parse", "--short=12", "HEAD"), dirty


with contextlib.suppress(OSError, subprocess.CalledProcessError):  # not a git checkout
    _started_at()


def stamp(doc: Mapping[str, Any]) -> dict[str, Any]:
    """`doc` with `commit`, `dirty` (as the benchmark started) and `command` first
    (replacing any it had)."""
    commit, dirty = _started_at()
    head = {"commit": commit, "dirty": dirty, "command": command_line()}
    return {**head, **{k: v for k, v in doc.items() if k not in head}}


def write_result(path: Path, doc: Mapping[str, Any], *, indent: int = 2, **dumps: Any) -> None:
    """Write `doc` stamped (`stamp`) as JSON to `path`."""
    path.write_text(json.dumps(stamp(doc), indent=indent, **dumps) + "\n", encoding="utf-8")


def measured_at(name: str, doc: Mapping[str, Any]) -> str:
    """The commit whose code the figures of result `name` belong to: its `commit`, or with
    `dirty`, the commit that recorded the file."""
    if doc.get("dirty"):
        return git("log", "-1", "--format=%H", "--", f"benchmarks/results/{name}.json")
    return git("rev-parse", str(doc["commit"]))


def changes_since(name: str, doc: Mapping[str, Any]) -> list[str]:
    """The commits after the result's own that changed the code it measures, oldest first,
    without `BEHAVIOUR_PRESERVING` ones: empty when the result is current. Merge commits are
    left out: the commits they bring in are listed themselves."""
    since = measured_at(name, doc)
    log = git("log", "--no-merges", "--reverse", "--format=%h %s", f"{since}..HEAD", "--",
              *MEASURES[name])  # fmt: skip
    changes = [line for line in log.splitlines() if line]
    keep = {git("rev-parse", "--short=7", h) for h in BEHAVIOUR_PRESERVING}
    return [c for c in changes if c.split()[0][:7] not in keep]


STALE_MARK = "> **Stale**: "
RUN_MARK = "> Run at "


def with_header(text: str, head: list[str]) -> str:
    """`text` (a result's markdown) with its mark lines (`RUN_MARK`, `STALE_MARK`) replaced by
    `head`: under the title when the first line is one (`# ...`), else first; one blank line
    on each side. Idempotent, and every other line keeps its place and content (the blank
    lines the old marks stood among collapse into those around `head`)."""
    lines = [ln for ln in text.split("\n") if not ln.startswith((STALE_MARK, RUN_MARK))]
    at = 1 if lines and lines[0].startswith("# ") else 0
    rest = lines[at:]
    while rest and not rest[0].strip():
        rest.pop(0)
    return "\n".join([*lines[:at], *([""] if at else []), *head, "", *rest])


def mark(name: str) -> str:
    """Set or clear result `name`'s `stale` (JSON) and its markdown's **Stale** header line
    from `changes_since`; the status line printed by `main`. A result without `commit` is
    stamped with the commit that recorded its file (`commit_note` says so)."""
    path = RESULTS / f"{name}.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    if "commit" not in doc:
        recorded = git("log", "-1", "--format=%H", "--", f"benchmarks/results/{name}.json")
        doc = {"commit": git("rev-parse", "--short=12", recorded), "dirty": False,
               "commit_note": "stamped afterwards: the commit that recorded this file",
               "command": doc.get("command"), **doc}  # fmt: skip
    changes = changes_since(name, doc)
    doc.pop("stale", None)
    note = None
    if changes:
        more = f" and {len(changes) - 1} later commits" if len(changes) > 1 else ""
        note = (f"the code it measures changed after {doc['commit'][:7]}: {changes[0][:90]}"
                f"{more}; rerun `{doc.get('command') or 'its benchmark'}`")  # fmt: skip
        doc["stale"] = note
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    markdown = path.with_suffix(".md")
    if markdown.exists():
        head = [f"{RUN_MARK}{doc['commit'][:12]} by `{doc.get('command') or 'unrecorded'}`"]
        if note:
            head += ["", STALE_MARK + note]
        text = markdown.read_text(encoding="utf-8")
        markdown.write_text(with_header(text, head), encoding="utf-8")
    return f"{name:24s} {'stale' if note else 'current':8s} {doc['commit'][:7]}"


README_ROW = re.compile(r"^(\| \[(\w+)\]\(benchmarks/results/\2\.md\) \|.*\| )[^|]*( \|)$", re.M)
"""A row of the README's results table: its last cell says where the result ran and whether
it holds (`<commit>, current` or `<commit>, **stale**`)."""


def mark_readme(text: str, states: Mapping[str, tuple[str, bool]]) -> str:
    """`text` (the README) with each results row's last cell set from `states` (result name ->
    (commit, stale)); rows of results not in `states` are left as they are."""

    def cell(row: re.Match[str]) -> str:
        if row[2] not in states:
            return row[0]
        commit, stale = states[row[2]]
        return f"{row[1]}{commit[:7]}, {'**stale**' if stale else 'current'}{row[3]}"

    return README_ROW.sub(cell, text)


def main() -> None:
    """`python -m benchmarks.lib.provenance`: mark every result current or stale (its JSON, its
    markdown, its README row), print each."""
    states = {}
    for path in sorted(RESULTS.glob("*.json")):
        print(mark(path.stem))
        doc = json.loads(path.read_text(encoding="utf-8"))
        states[path.stem] = (str(doc["commit"]), "stale" in doc)
    readme = ROOT / "README.md"
    readme.write_text(mark_readme(readme.read_text(encoding="utf-8"), states), encoding="utf-8")


if __name__ == "__main__":
    main()
