"""Every module of our packages imports without the optional heavy dependencies (vLLM, torch,
the tokenizer libraries, Playwright): `pytest --doctest-modules` imports them all, and so may
any user. Run in a fresh interpreter so nothing imported by other tests counts."""

import ast
import graphlib
import subprocess
import sys
from collections.abc import Mapping, Set
from pathlib import Path

from tests.conftest import ROOT

HEAVY = ["vllm", "torch", "transformers", "tiktoken", "tokenizers", "playwright", "highspy", "ray"]
SCRIPT = f"""
import importlib, pkgutil, sys
for package in ("llm_assets", "resources", "jobs", "benchmarks"):
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
print(sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r})))
"""


def test_no_module_imports_a_heavy_optional_dependency():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout


ALLOWED_FROM_LLM_ASSETS = {"llm_assets.output_spec"}
"""What `resources/` may import from `llm_assets` (issue 23 item 4): the module defining
`OutputSpec`, the request's output constraint. Everything else points down, never up."""


def llm_assets_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import of an `llm_assets` module in `tree`, at any depth (a
    lazy import inside a function counts), including `importlib.import_module("llm_assets...")`
    and `__import__` with a literal name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module == "llm_assets":  # `from llm_assets import output_spec` names modules
                found += [(node.lineno, f"llm_assets.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            first = node.args[0]
            if name in ("import_module", "__import__") and isinstance(first, ast.Constant):
                found.append((node.lineno, str(first.value)))
    return [(line, m) for line, m in found if m == "llm_assets" or m.startswith("llm_assets.")]


def test_resources_import_nothing_from_llm_assets_but_the_output_spec():
    crossings = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in sorted((ROOT / "resources").rglob("*.py"))
        for line, module in llm_assets_imports(ast.parse(path.read_text(encoding="utf-8")))
        if module not in ALLOWED_FROM_LLM_ASSETS
    ]
    assert crossings == [], "resources/ imports from llm_assets:\n" + "\n".join(crossings)


def test_the_import_scan_sees_every_form():
    source = (
        "import llm_assets.query.model\n"
        "from llm_assets import output_spec, sql\n"
        "def lazy():\n"
        "    from llm_assets.optimizer.metrics import phc\n"
        "    importlib.import_module('llm_assets.data')\n"
        "from llm_assets.output_spec import OutputSpec\n"
        "from .llm_assets import nothing\n"
        "import llm_assets_other\n"
    )
    assert sorted(llm_assets_imports(ast.parse(source))) == [
        (1, "llm_assets.query.model"),
        (2, "llm_assets.output_spec"),
        (2, "llm_assets.sql"),
        (4, "llm_assets.optimizer.metrics"),
        (5, "llm_assets.data"),
        (6, "llm_assets.output_spec"),
    ]


MAX_MODULE_LINES = 450
"""The longest a module of `llm_assets/`, `resources/` or `jobs/` may be (issue 23 item 7): a
module past it holds more than one job, and is split along its seams."""


def long_modules(root, limit: int = MAX_MODULE_LINES) -> list[str]:
    """`path: lines` of every `.py` file under `llm_assets/`, `resources/` and `jobs/` of `root`
    with more than `limit` lines, longest first."""
    counts = [
        (len(path.read_text(encoding="utf-8").splitlines()), path.relative_to(root))
        for package in ("llm_assets", "resources", "jobs")
        for path in (root / package).rglob("*.py")
    ]
    return [f"{path}: {n}" for n, path in sorted(counts, reverse=True) if n > limit]


def test_every_module_has_at_most_450_lines():
    offenders = long_modules(ROOT)
    assert offenders == [], f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(offenders)


def test_the_line_count_sees_a_long_module(tmp_path):
    (tmp_path / "jobs" / "deep").mkdir(parents=True)
    (tmp_path / "llm_assets").mkdir()
    (tmp_path / "resources").mkdir()
    (tmp_path / "jobs" / "deep" / "long.py").write_text("x = 1\n" * 451)
    (tmp_path / "llm_assets" / "short.py").write_text("x = 1\n" * 450)
    assert long_modules(tmp_path) == ["jobs/deep/long.py: 451"]


PACKAGES = ("llm_assets", "resources", "jobs", "benchmarks")


def module_names() -> dict[str, Path]:
    """Every module of the project's packages, by dotted name (a package by its own name)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported_modules(tree: ast.AST, modules: Set[str], here: str) -> set[str]:
    """The project modules `tree` (the module `here`) imports at any depth: top level, inside a
    function or under `if TYPE_CHECKING:` alike; `from package import module` counts as that
    module only (as import-linter and pydeps count it), `from module import name` as the module."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the importing module's package
                anchor = here.split(".")[: -node.level]
                base = ".".join([*anchor, base] if base else anchor)
            submodules = {f"{base}.{alias.name}" for alias in node.names} & modules
            # `from package import module` imports that module; any other name, the package
            names |= submodules | ({base} if len(submodules) < len(node.names) else set())
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in ("import_module", "__import__"):
                names.add(str(node.args[0].value))
    return {name for name in names if name in modules} - {here}


def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    return {
        name: imported_modules(ast.parse(path.read_text(encoding="utf-8")), modules.keys(), name)
        for name, path in modules.items()
    }


def first_cycle(graph: Mapping[str, Set[str]]) -> list[str] | None:
    """One import cycle of `graph` (module -> the modules it imports) as [a, b, ..., a], or None."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        return list(reversed(error.args[1]))
    return None


def test_no_module_imports_another_that_imports_it_back():
    cycle = first_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_sees_a_cycle_through_a_lazy_import():
    source = {"a": "import b\n", "b": "def f():\n    from c import x\n", "c": "import a\n"}
    graph = {
        name: imported_modules(ast.parse(text), source.keys(), name)
        for name, text in source.items()
    }
    assert graph == {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    cycle = first_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c"}
    assert first_cycle({**graph, "c": set()}) is None


def test_from_a_package_import_a_module_counts_as_that_module_only():
    modules = {"p", "p.m", "p.n"}
    tree = ast.parse("from p import m\nif TYPE_CHECKING:\n    from p.n import X\n")
    assert imported_modules(tree, modules, "q") == {"p.m", "p.n"}
    assert imported_modules(ast.parse("from p import helper"), modules, "q") == {"p"}
    assert imported_modules(ast.parse("from . import n"), modules, "p.m") == {"p.n"}
