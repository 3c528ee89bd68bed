"""Mutation testing of `llm_assets.optimizer`, `llm_assets.assets` and `resources.sim` (mutmut).

    python -m benchmarks.mutation run [--all | --critical] [--sample N] [--seed S]
                                      [--rerun | --survivors]
    python -m benchmarks.mutation confirm
    python -m benchmarks.mutation report [--sample N] [--seed S]

mutmut (pinned in the dev extra; configured by `[tool.mutmut]` in pyproject.toml) copies the
packages into `mutants/`, compiles every mutant of a function into it behind a trampoline and, for
each mutant, forks a pytest that runs only the tests which called that function in one traced
run of the test selection. `run --all` is plain `mutmut run` (every mutant; it resumes where it
stopped). `run --critical` runs the mutants of the four areas the acceptance names in full
(`benchmarks.lib.mutants.CRITICAL`); `run --sample N` a seeded uniform sample of N mutants per
package (for a kill rate when the full run does not fit). Only mutants without a verdict run
unless `--rerun` (`--survivors` adds those that survived and are not shown equivalent: after
adding tests). `report` writes
`benchmarks/results/mutation.{json,md}`: per package counts and kill rate, per critical area
every survivor with its diff and its disposition from `benchmarks/mutation_survivors.toml`
(equivalent, with why, or killed by a new test). `confirm` runs each survivor said to be killed
by a new test against that test (a survivor it kills counts as killed in the report). Wall times
of the runs are kept in `mutants/mutation-runs.json`.

Tests that read `../shared` find it through LLM_ASSETS_SHARED (pytest runs inside `mutants/`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
import tomllib
from collections import Counter
from importlib.metadata import version
from pathlib import Path

from benchmarks.lib.mutants import (
    CRITICAL,
    KEEP_LONG_LOOP,
    MUTANTS_DIR,
    PACKAGES,
    Mutant,
    critical_area,
    load_mutants,
    package_of,
    sample,
)
from benchmarks.lib.provenance import write_result

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DISPOSITIONS = ROOT / "benchmarks" / "mutation_survivors.toml"
RUNS_LOG = MUTANTS_DIR / "mutation-runs.json"
PREVIOUS = RESULTS / "mutation.json"
CONFIRMED = MUTANTS_DIR / "confirmed.json"
MUTMUT = Path(sys.executable).with_name("mutmut")
DETECTED = ("killed", "timeout")
"""Verdicts that count as the tests noticing the mutant (a timeout: the mutant made them hang)."""


def dispositions() -> dict[str, dict[str, str]]:
    return tomllib.loads(DISPOSITIONS.read_text()) if DISPOSITIONS.exists() else {}


def generate() -> None:
    """Make (or refresh) `mutants/` without running anything (mutmut 3.8's own steps)."""
    from mutmut.__main__ import create_mutants
    from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir

    MUTANTS_DIR.mkdir(exist_ok=True)
    copy_src_dir()
    copy_also_copy_files()
    create_mutants(2)


def diff(mutant: Mutant) -> str:
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    return get_diff_for_mutant(mutant.name, path=mutant.path)


def _area(mutant: Mutant) -> str | None:
    from fnmatch import fnmatch

    needs_diff = fnmatch(mutant.name, KEEP_LONG_LOOP)
    return critical_area(mutant.name, diff(mutant) if needs_diff else "")


def select(
    mutants: list[Mutant],
    *,
    critical: bool,
    per_package: int,
    seed: int,
    areas: list[str],
    packages: list[str] | None = None,
) -> list[str]:
    """The mutants a run covers: the critical areas (or those in `areas`) in full, and the
    seeded sample of `per_package` per package, of the packages in `packages` (default all)."""
    names: set[str] = set()
    if critical:
        names |= {m.name for m in mutants if _area(m) in (areas or CRITICAL)}
    if per_package:
        drawn = sample([m.name for m in mutants], per_package, seed)
        names |= {n for n in drawn if packages is None or package_of(n) in packages}
    return sorted(names)


def run(args: argparse.Namespace) -> None:
    os.chdir(ROOT)
    env = {**os.environ, "LLM_ASSETS_SHARED": str(ROOT.parent / "shared")}
    env.pop("PYTHONPATH", None)  # mutmut puts mutants/ first on sys.path itself
    command = [str(MUTMUT), "run", "--max-children", str(args.max_children)]
    if args.all:
        names: list[str] = []
    else:
        generate()
        mutants = load_mutants()
        chosen = set(
            select(
                mutants,
                critical=args.critical,
                per_package=args.sample,
                seed=args.seed,
                areas=args.area,
                packages=args.package,
            )
        )
        equivalent = {n for n, d in dispositions().items() if "equivalent" in d}
        pending = [
            m
            for m in mutants
            if args.rerun
            or m.exit_code is None
            # after new tests: the survivors they may now kill (not those shown equivalent)
            or args.survivors
            and m.status in ("survived", "no tests")
            and m.name not in equivalent
        ]
        names = [m.name for m in pending if m.name in chosen]
        if not names:
            print("every selected mutant has a verdict (--rerun runs them again)")
            return
    print(f"{' '.join(command)} <{len(names) or 'all'} mutants>", flush=True)
    start = time.perf_counter()
    code = subprocess.call(command + names, env=env)
    wall = time.perf_counter() - start
    log = json.loads(RUNS_LOG.read_text()) if RUNS_LOG.exists() else []
    log.append(
        {
            "argv": sys.argv[1:],
            "mutants": len(names) or "all pending",
            "wall_s": round(wall, 1),
            "exit_code": code,
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    )
    RUNS_LOG.write_text(json.dumps(log, indent=1))
    print(f"{wall:.0f} s wall, mutmut exit code {code}")


def _test_of(killed_by: str) -> str:
    """The pytest node a `killed_by` disposition names (its first word; a bare file name is
    looked up under tests/)."""
    file, sep, test = killed_by.split()[0].partition("::")
    if not Path(file).exists():
        file = str(next(Path("tests").rglob(Path(file).name)))
    return file + sep + test


def confirm(args: argparse.Namespace) -> None:
    """Run each survivor that a disposition says a new test kills against that test, in a copy
    of `mutants/` with the current tests (mutmut's trampolines pick the mutant from
    MUTANT_UNDER_TEST), without waiting for a whole `mutmut run`; records the exit codes in
    `mutants/confirmed.json` (non-zero: the test fails on the mutant, i.e. kills it)."""
    import shutil
    import tempfile

    os.chdir(ROOT)
    killed_by = {n: d["killed_by"] for n, d in dispositions().items() if "killed_by" in d}
    todo = {
        m.name: _test_of(killed_by[m.name])
        for m in load_mutants()
        if m.name in killed_by and m.status != "killed"
    }
    confirmed = json.loads(CONFIRMED.read_text()) if CONFIRMED.exists() else {}
    todo = {n: t for n, t in todo.items() if confirmed.get(n, {}).get("test") != t}
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "mutants"
        shutil.copytree(MUTANTS_DIR, copy)
        shutil.copytree("tests", copy / "tests", dirs_exist_ok=True)
        env = {**os.environ, "LLM_ASSETS_SHARED": str(ROOT.parent / "shared")}
        env.pop("PYTHONPATH", None)
        pytest = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
        for name, test in sorted(todo.items()):
            run_env = {**env, "MUTANT_UNDER_TEST": name}
            quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
            code = subprocess.call(pytest + [test], cwd=copy, env=run_env, **quiet)
            confirmed[name] = {"test": test, "exit_code": code}
            print(code, name, test, flush=True)
    CONFIRMED.write_text(json.dumps(confirmed, indent=1, ensure_ascii=False))


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson interval of a proportion k/n."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def _counts(mutants: list[Mutant]) -> dict:
    c = Counter(m.status for m in mutants)
    listed = (*DETECTED, "survived", "no tests", "not checked")
    tested = sum(c[s] for s in (*DETECTED, "survived"))
    detected = sum(c[s] for s in DETECTED)
    low, high = wilson(detected, tested)
    return {
        "mutants": len(mutants),
        **{s: c[s] for s in ("killed", "survived", "timeout", "no tests", "not checked")},
        "other": sum(v for s, v in c.items() if s not in listed),
        "kill_rate": round(detected / tested, 4) if tested else None,
        "kill_rate_95ci": [round(low, 4), round(high, 4)] if tested else None,
    }


def _survivor(m: Mutant, known: dict[str, dict[str, str]]) -> dict[str, str | None]:
    disposition = known.get(m.name, {})
    return {
        "name": m.name,
        "status": m.status,
        "diff": diff(m),
        "equivalent": disposition.get("equivalent"),
        "killed_by": disposition.get("killed_by"),
    }


def report(args: argparse.Namespace) -> None:
    """Write the results. A package or critical area without any verdict in `mutants/` (not
    run on this commit) keeps the figures of the previous report, with the commit they were
    measured on, so a run of some packages does not erase the others."""
    os.chdir(ROOT)
    confirmed = json.loads(CONFIRMED.read_text()) if CONFIRMED.exists() else {}
    if args.commit is None:
        git = ["git", "rev-parse", "--short", "HEAD"]
        args.commit = subprocess.run(git, capture_output=True, text=True).stdout.strip()
    # a survivor that its new test kills in `confirm` counts as killed (exit code 1)
    mutants = [
        Mutant(m.name, m.path, 1)
        if m.status == "survived" and confirmed.get(m.name, {}).get("exit_code", 0) != 0
        else m
        for m in load_mutants()
    ]
    known = dispositions()
    previous = json.loads(PREVIOUS.read_text()) if PREVIOUS.exists() else {}
    in_sample = set(sample([m.name for m in mutants], args.sample, args.seed))
    packages = {}
    for package in PACKAGES:
        mine = [m for m in mutants if package_of(m.name) == package]
        if not any(m.status != "not checked" for m in mine) and package in previous.get(
            "packages", {}
        ):
            # not run on this commit: the figures measured before, with the commit they are of
            old = previous["packages"][package]
            packages[package] = {
                **old,
                "measured_on": old.get("measured_on", previous["source_commit"]),
            }
            continue
        packages[package] = {
            "all_mutants": len(mine),
            "measured_on": args.commit,
            "sample": _counts([m for m in mine if m.name in in_sample]),
            "every_checked_mutant": _counts([m for m in mine if m.status != "not checked"]),
            "survivors": [
                _survivor(m, known)
                for m in mine
                if m.name in in_sample and m.status not in (*DETECTED, "not checked")
            ],
        }
    areas: dict[str, dict] = {}
    for m in mutants:
        area = _area(m)
        if area is None:
            continue
        entry = areas.setdefault(area, {"mutants": [], "survivors": []})
        entry["mutants"].append(m)
        if m.status not in (*DETECTED, "not checked"):
            entry["survivors"].append(_survivor(m, known))
    critical_areas = {
        area: {**_counts(e["mutants"]), "measured_on": args.commit, "survivors": e["survivors"]}
        for area, e in sorted(areas.items())
        if any(m.status != "not checked" for m in e["mutants"])
    }
    for area, old in previous.get("critical_areas", {}).items():
        if area not in critical_areas:
            measured_on = old.get("measured_on", previous["source_commit"])
            critical_areas[area] = {**old, "measured_on": measured_on}
    runs = json.loads(RUNS_LOG.read_text()) if RUNS_LOG.exists() else []
    earlier = [r for r in previous.get("runs", []) if r not in runs]
    for r in earlier:
        r.setdefault("commit", previous["source_commit"])
    killed_by_new_tests = {n: d["killed_by"] for n, d in known.items() if "killed_by" in d}
    result = {
        "tool": f"mutmut {version('mutmut')}",
        "source_commit": args.commit,
        "sample": {"per_package": args.sample, "seed": args.seed},
        "runs": earlier + runs,
        "packages": packages,
        "critical_areas": dict(sorted(critical_areas.items())),
        "killed_by_new_tests": killed_by_new_tests,
        "confirmed_by_direct_run": confirmed,
    }
    RESULTS.mkdir(exist_ok=True)
    write_result((RESULTS / "mutation.json"), result, indent=1, ensure_ascii=False)
    (RESULTS / "mutation.md").write_text(markdown(result))
    print((RESULTS / "mutation.md").read_text())


def _rate(c: dict) -> str:
    if c["kill_rate"] is None:
        return "-"
    low, high = c["kill_rate_95ci"]
    return f"{100 * c['kill_rate']:.1f}% ({100 * low:.0f}-{100 * high:.0f}%)"


def _row(label: str, c: dict) -> str:
    keys = ("mutants", "killed", "timeout", "survived", "no tests", "not checked")
    cells = [c[k] for k in keys]
    return f"| {label} | " + " | ".join(map(str, cells)) + f" | {_rate(c)} |"


def markdown(r: dict) -> str:
    head = "| mutants | killed | timeout | survived | no tests | not run | kill rate (95% CI) |"
    rule = "|---|---|---|---|---|---|---|---|"
    out = [
        "# Mutation testing",
        "",
        f"{r['tool']} on commit {r['source_commit']}; `python -m benchmarks.mutation report`. "
        "Kill rate = (killed + timeout) / (killed + timeout + survived); 'no tests': no test in "
        "the selection calls the mutated function. See the module docstring of "
        "`benchmarks.mutation` for how it runs.",
        "",
        "## Runs",
        "",
        "| command | commit | mutants | wall s | finished (UTC) |",
        "|---|---|---|---|---|",
        *[
            f"| `{' '.join(x['argv'])}` | {x.get('commit', r['source_commit'])} | "
            f"{x['mutants']} | {x['wall_s']} | {x['finished']} |"
            for x in r["runs"]
        ],
        "",
        f"## Per package: seeded sample ({r['sample']['per_package']} per package, "
        f"seed {r['sample']['seed']})",
        "",
        "| package " + head,
        rule,
        *[
            _row(f"{p} (of {v['all_mutants']}; {v['measured_on']})", v["sample"])
            for p, v in r["packages"].items()
        ],
        "",
        "Every mutant with a verdict (sample and critical areas together; biased towards the "
        "critical areas):",
        "",
        "| package " + head,
        rule,
        *[_row(p, v["every_checked_mutant"]) for p, v in r["packages"].items()],
        "",
        "## Critical areas (every mutant)",
        "",
        "| area " + head,
        rule,
        *[_row(f"{a} ({v['measured_on']})", v) for a, v in r["critical_areas"].items()],
        "",
    ]
    sections = [(f"critical area {a}", v["survivors"]) for a, v in r["critical_areas"].items()]
    sections += [
        (f"sample of {p}", v["survivors"]) for p, v in r["packages"].items() if "survivors" in v
    ]
    for title, survivors in sections:
        out += [f"### Survivors: {title}", ""]
        if not survivors:
            out += ["None.", ""]
        for s in survivors:
            if s["equivalent"]:
                why = f"equivalent: {s['equivalent']}"
            elif s["killed_by"]:
                why = f"killed by a new test (mutmut has not run it again yet): {s['killed_by']}"
            else:
                why = "**UNEXPLAINED**"
            out += [f"- `{s['name']}` ({s['status']}): {why}", "", "```diff", s["diff"], "```", ""]
    if r["killed_by_new_tests"]:
        out += ["## Survivors of the first run killed by new tests", ""]
        out += [f"- `{n}`: {t}" for n, t in sorted(r["killed_by_new_tests"].items())]
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("confirm", help="run survivors against the new tests said to kill them")
    for name in ("run", "report"):
        p = sub.add_parser(name)
        p.add_argument("--sample", type=int, default=0, help="mutants per package (seeded)")
        p.add_argument("--seed", type=int, default=0)
    r = sub.choices["run"]
    r.add_argument("--all", action="store_true", help="every mutant (plain `mutmut run`)")
    r.add_argument("--critical", action="store_true", help="every mutant of the critical areas")
    r.add_argument(
        "--area", action="append", choices=sorted(CRITICAL), help="with --critical: only these"
    )
    r.add_argument("--rerun", action="store_true", help="also mutants that have a verdict")
    r.add_argument("--survivors", action="store_true", help="also survivors not shown equivalent")
    r.add_argument(
        "--package", action="append", choices=list(PACKAGES), help="with --sample: only these"
    )
    r.add_argument("--max-children", type=int, default=2)
    sub.choices["report"].add_argument(
        "--commit", default=None, help="the source commit measured (default: HEAD)"
    )
    args = parser.parse_args(argv)
    if args.command == "run" and not (args.all or args.critical or args.sample):
        parser.error("run needs --all, --critical or --sample N")
    {"run": run, "report": report, "confirm": confirm}[args.command](args)


if __name__ == "__main__":
    main()
