"""The layering docs/design.md describes, checked on the source: every import counts, function-level ones
included (only ``if TYPE_CHECKING:`` blocks, which never run, are left out)."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "toolkit"

ALLOWED: dict[str, set[str]] = {
    "toolkit.version": set(),
    "toolkit.errors": set(),
    "toolkit.child_env": set(),
    "toolkit.build_lock": set(),
    "toolkit.files": set(),
    "toolkit.procs": set(),
    "toolkit.state": {"toolkit.errors", "toolkit.files"},
    "toolkit.console": {"toolkit.errors"},
    "toolkit.workloads": {"toolkit.errors"},
    "toolkit.vta": {"toolkit.errors", "toolkit.workloads"},
    "toolkit.boards": {"toolkit.errors", "toolkit.files", "toolkit.vta"},
    "toolkit.bitstreams": {"toolkit.errors", "toolkit.boards", "toolkit.vta"},
    "toolkit.tuning": {"toolkit.errors", "toolkit.version", "toolkit.boards", "toolkit.workloads", "toolkit.child_env"},
    "toolkit.rpc": {"toolkit.errors", "toolkit.version", "toolkit.boards", "toolkit.bitstreams", "toolkit.vta",
                    "toolkit.child_env", "toolkit.build_lock", "toolkit.files", "toolkit.procs", "toolkit.state"},
    "toolkit.manifest": {"toolkit.errors", "toolkit.version", "toolkit.tuning", "toolkit.workloads"},
    "toolkit.backends": {"toolkit.errors", "toolkit.boards", "toolkit.bitstreams", "toolkit.workloads",
                         "toolkit.vta", "toolkit.tuning", "toolkit.rpc", "toolkit.manifest"},
    "toolkit.export": {"toolkit.errors", "toolkit.version", "toolkit.boards", "toolkit.workloads",
                       "toolkit.tuning", "toolkit.backends", "toolkit.manifest", "toolkit.state"},
    "toolkit.runs": {"toolkit.errors", "toolkit.boards", "toolkit.tuning", "toolkit.backends", "toolkit.export"},
    "toolkit.cluster": {"toolkit.errors", "toolkit.tuning", "toolkit.procs", "toolkit.state"},
    "toolkit.harness": {"toolkit.errors", "toolkit.version", "toolkit.boards", "toolkit.workloads",
                      "toolkit.tuning", "toolkit.backends", "toolkit.cluster", "toolkit.files"},
    "toolkit.dashboard": {"toolkit.errors", "toolkit.boards", "toolkit.workloads", "toolkit.tuning",
                          "toolkit.backends", "toolkit.export", "toolkit.manifest", "toolkit.rpc", "toolkit.harness"},
    "toolkit.report": {"toolkit.errors", "toolkit.tuning", "toolkit.harness", "toolkit.workloads"},
    "toolkit.testing": {"toolkit.errors", "toolkit.tuning", "toolkit.rpc", "toolkit.build_lock", "toolkit.dashboard"},
}
"""Package -> the packages it may import. ``toolkit`` (the facade), ``toolkit.cli``, ``toolkit.demo``,
``toolkit.__main__`` and ``toolkit.entry`` (the console script) sit on top and may import any of them."""

TOP = {"toolkit", "toolkit.cli", "toolkit.demo", "toolkit.__main__", "toolkit.entry"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _runtime_imports(tree: ast.AST, module: str, is_init: bool) -> set[str]:
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_init else 0)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            out.update(f"{source}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def _graph() -> dict[str, set[str]]:
    """Module -> the toolkit modules it imports (``from toolkit import bitstreams`` imports ``toolkit.bitstreams``;
    ``from toolkit.workloads import parse_workload`` imports ``toolkit.workloads``)."""
    paths = sorted(ROOT.rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        mod = _module_name(path)
        names = _runtime_imports(ast.parse(path.read_text()), mod, path.name == "__init__.py")
        resolved = set()
        for name in names:
            while name not in modules and "." in name:
                name = name.rsplit(".", 1)[0]
            if name in modules and name != mod:
                resolved.add(name)
        graph[mod] = resolved
    return graph


def _package_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for mod, names in graph.items():
        for name in names:
            a, b = _package(mod), _package(name)
            if a != b:
                edges[a].add(b)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_between_packages():
    assert _cycles(_package_edges(_graph())) == []


def test_no_import_cycle_between_modules():
    assert _cycles(_graph()) == []


def test_every_package_imports_only_what_its_layer_allows():
    edges = _package_edges(_graph())
    unknown = sorted(set(edges) - set(ALLOWED) - TOP)
    assert not unknown, f"packages without a rule here (add one, and to docs/design.md): {unknown}"
    wrong = {pkg: sorted(deps - ALLOWED[pkg] - {"toolkit.version"} if pkg != "toolkit.version" else deps)
             for pkg, deps in edges.items() if pkg in ALLOWED}
    assert {k: v for k, v in wrong.items() if v} == {}


def test_no_package_imports_another_packages_private_names():
    """A name that starts with ``_`` is its module's own: another package uses public names only."""
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        mod = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("toolkit."):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                if private and _package(node.module) != _package(mod):
                    bad.append(f"{mod} imports {', '.join(private)} from {node.module}")
    assert bad == []


def test_nothing_below_the_top_imports_the_facade_or_the_cli():
    bad = sorted(f"{mod} -> {name}" for mod, names in _graph().items() if _package(mod) not in TOP
                 for name in names if name in ("toolkit", "toolkit.cli") or name.startswith("toolkit.cli."))
    assert bad == []


def test_the_tuning_core_and_its_tuners_import_no_tvm():
    offenders = []
    for path in (ROOT / "tuning").rglob("*.py"):
        names = _runtime_imports(ast.parse(path.read_text()), _module_name(path), path.name == "__init__.py")
        if any(n == "tvm" or n.startswith("tvm.") for n in names):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


VTA_PACKAGES = ("toolkit.vta", "toolkit.backends.vta")
VTA_IMPORTERS = ("toolkit.vta", "toolkit.backends.vta", "toolkit.rpc.agent", "toolkit.rpc.vta_driver",
                 "toolkit.bitstreams", "toolkit.cli.vta")
"""The VTA compiler and backend, and the only modules outside them that may import them: the board agent and the
register-level driver (they run VTA programs on the board), the bitstream catalog, the ``edgetune vta`` commands."""


def test_only_the_vta_family_imports_the_vta_packages():
    def inside(module: str, packages: tuple[str, ...]) -> bool:
        return any(module == p or module.startswith(p + ".") for p in packages)

    bad = sorted(f"{mod} -> {name}" for mod, names in _graph().items() if not inside(mod, VTA_IMPORTERS)
                 for name in names if inside(name, VTA_PACKAGES))
    assert bad == []


FAMILY_BRANCH = re.compile(r"family\s*[!=]=|template\.name\s*[!=]=")


def test_family_branches_live_only_in_the_backends():
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in ROOT.rglob("*.py") if "backends" not in p.parts
            for i, line in enumerate(p.read_text().splitlines(), 1) if FAMILY_BRANCH.search(line)]
    assert hits == []


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_every_layer_package_exists(package):
    path = ROOT.parent / Path(*package.split("."))
    assert path.is_dir() or path.with_suffix(".py").is_file()


def test_a_backend_holds_family_behaviour_and_no_readme_text():
    """README sections live in each family's readme module (named by the backend), not in its methods."""
    import importlib

    from toolkit.backends import backend_for
    from toolkit.backends.registry import BACKENDS

    for family in BACKENDS:
        backend = backend_for(family)
        assert not [name for name in dir(backend) if "readme" in name and callable(getattr(backend, name))]
        module = importlib.import_module(backend.readme)
        assert callable(module.kernel_usage) and callable(module.model_usage)
