"""The mutants mutmut made (`mutants/**/*.py.meta`), their verdicts, and the selections
`benchmarks.mutation` runs: the critical areas in full and a seeded sample per package.

mutmut 3 names a mutant `<module>.x_<function>__mutmut_<n>` (or `xǁ<Class>ǁ<method>__...`) and
stores its exit code in the `.meta` file beside the mutated copy under `mutants/`; None means
not run yet. Everything here reads those files; nothing writes them.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

__all__ = [
    "CRITICAL",
    "PACKAGES",
    "Mutant",
    "critical_area",
    "load_mutants",
    "package_of",
    "sample",
    "status",
]

MUTANTS_DIR = Path("mutants")

PACKAGES: dict[str, tuple[str, ...]] = {
    "llm_assets.optimizer": ("llm_assets.optimizer",),
    "llm_assets.assets": ("llm_assets.assets",),
    "resources.sim": ("resources.sim",),
    "llm_assets.pipeline": ("llm_assets.pipeline",),
    "OpenAI engine + request path": (
        "resources.openai.engine",
        "resources.openai.request",
        "resources.openai.attempt",
        "resources.openai.lean",
        "resources.openai.run",
        "resources.openai.wire",
    ),
    "fleet_plan": ("resources.openai.placement",),
    "openai_fleet": (
        "resources.openai.fleet",
        "resources.openai.health",
        "resources.openai.stall",
        "resources.openai.roster",
    ),
    "openai_probe": ("resources.openai.probe",),
    "resources.response_cache": ("resources.response_cache",),
    "resources.runner": ("resources.runner",),
    "resources.warehouse.store": ("resources.warehouse.store",),
}
"""The groups reported, each by the modules it holds (`[tool.mutmut] only_mutate` in
pyproject.toml mutates exactly these)."""

_PREEMPTION = (
    # the victim choices: `running.pop()` after the order the engine or the policy left
    "resources.sim.policies.vllm_v0.*",
    "resources.sim.policies.vllm_v1.*",
    "resources.sim.policies.priority.x_decode_step__*",
    "resources.sim.policies.priority.x_priority_preemption__*",
    "resources.sim.policies.priority.x_sort_running__*",
    "resources.sim.policies.relserve.x_start_step__*",
    "resources.sim.policies.relserve_v1.x_make_room__*",
    "resources.sim.policies.base.xǁScheduleContextǁpreempt__*",
    # keep-long: the engine sorts `running` longest first before each schedule call
    "resources.sim.engine.x__computed__*",
)

CRITICAL: dict[str, tuple[str, ...]] = {
    "checks": ("llm_assets.assets.checks.*",),
    "block pool": ("resources.sim.block_cache.*",),
    "cost model": ("resources.sim.cost_model.*",),
    "preemption order": _PREEMPTION,
}
"""Areas run in full, by mutant-name patterns (fnmatch). The issue's acceptance asks for no
unexplained survivor in these."""

KEEP_LONG_LOOP = "resources.sim.engine.xǁSimulatedEngineǁ_loop__*"
"""The engine's iteration loop: only its mutants on the keep-long lines are in the preemption
area (`_keep_long_line`), the rest of the loop is sampled with its package."""

_KEEP_LONG_WORDS = ("keep_long", "running.sort", "_computed")

_STATUS = {
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    34: "skipped",
    36: "timeout",
    24: "timeout",
    -24: "timeout",
    152: "timeout",
    255: "timeout",
    -9: "segfault",
    -11: "segfault",
    None: "not checked",
}


def status(exit_code: int | None) -> str:
    """mutmut's name for an exit code (`mutmut.stats.status_by_exit_code`)."""
    return _STATUS.get(exit_code, "suspicious")


@dataclass(frozen=True)
class Mutant:
    name: str
    path: Path
    exit_code: int | None

    @property
    def status(self) -> str:
        return status(self.exit_code)


def package_of(name: str) -> str:
    """The group in PACKAGES a mutant name belongs to (ValueError if none)."""
    for package, modules in PACKAGES.items():
        if any(name.startswith(module + ".") for module in modules):
            return package
    raise ValueError(f"mutant {name!r} is in none of {PACKAGES}")


def load_mutants(root: Path = MUTANTS_DIR) -> list[Mutant]:
    """Every mutant in `root`'s `.meta` files, sorted by name."""
    out = []
    for meta in sorted(root.rglob("*.py.meta")):
        source = meta.relative_to(root).with_suffix("")
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            out.append(Mutant(name, source, code))
    return sorted(out, key=lambda m: m.name)


def _keep_long_line(name: str, diff: str) -> bool:
    changed = [
        line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")
    ]
    return fnmatch(name, KEEP_LONG_LOOP) and any(
        word in line for line in changed for word in _KEEP_LONG_WORDS
    )


def critical_area(name: str, diff: str = "") -> str | None:
    """The critical area a mutant is in, or None. `diff` (mutmut's) is needed only for the
    engine loop, whose keep-long lines belong to the preemption order."""
    for area, patterns in CRITICAL.items():
        if any(fnmatch(name, p) for p in patterns):
            return area
    if diff and _keep_long_line(name, diff):
        return "preemption order"
    return None


def sample(names: Iterable[str], per_package: int, seed: int) -> list[str]:
    """`per_package` names drawn uniformly from each package's mutants with `random.Random(seed)`
    (all of them where a package has fewer); the same names for the same inputs."""
    by_package: dict[str, list[str]] = {p: [] for p in PACKAGES}
    for name in sorted(names):
        by_package[package_of(name)].append(name)
    rng = random.Random(seed)
    out: list[str] = []
    for package in PACKAGES:
        pool = by_package[package]
        out += rng.sample(pool, min(per_package, len(pool)))
    return sorted(out)
