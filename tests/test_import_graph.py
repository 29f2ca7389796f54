"""The modules of numawatch import each other without a circle.

A circle makes the import order matter (the first module of it to be imported sees the others half made) and is
usually hidden with an import inside a function. The graph is read from the source with ``ast``: the imports at
module level, in ``if``/``try`` blocks too, but not those under ``if TYPE_CHECKING:`` (never run) nor those inside
functions (run late, on purpose: ``cli`` imports what a subcommand needs when it runs).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "exporter" / "numawatch"


def _modules(package: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, whether it is a package's __init__)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)
    return found


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(statements: list[ast.stmt], inside_functions: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """The import statements run when the module is imported: not under TYPE_CHECKING, and not in functions unless
    ``inside_functions``."""
    found: list[ast.Import | ast.ImportFrom] = []
    for statement in statements:
        if isinstance(statement, ast.Import | ast.ImportFrom):
            found.append(statement)
            continue
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef) and not inside_functions:
            continue
        blocks: list[list[ast.stmt]] = []
        if isinstance(statement, ast.If) and _type_checking(statement.test):
            blocks.append(statement.orelse)
        else:
            for name in ("body", "orelse", "finalbody"):
                blocks.append(getattr(statement, name, None) or [])
            blocks.extend(handler.body for handler in getattr(statement, "handlers", ()))
            blocks.extend(case.body for case in getattr(statement, "cases", ()))
        for block in blocks:
            found.extend(_imports(block, inside_functions))
    return found


def _absolute(module: str, is_package: bool, statement: ast.ImportFrom) -> str:
    if not statement.level:
        return statement.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (statement.level - 1)]
    return ".".join([*base, *([statement.module] if statement.module else [])])


def import_graph(package: Path, inside_functions: bool = False) -> dict[str, dict[str, set[str]]]:
    """Module -> imported numawatch module -> the names taken from it (empty for ``import x``); with
    ``inside_functions``, the imports that functions make when they run count too."""
    modules = _modules(package)
    graph: dict[str, dict[str, set[str]]] = {}
    for module, (path, is_package) in modules.items():
        edges: dict[str, set[str]] = {}
        for statement in _imports(ast.parse(path.read_text(), str(path)).body, inside_functions):
            if isinstance(statement, ast.Import):
                for alias in statement.names:
                    if alias.name in modules:
                        edges.setdefault(alias.name, set())
                continue
            source = _absolute(module, is_package, statement)
            for alias in statement.names:
                if f"{source}.{alias.name}" in modules:  # from package import submodule
                    edges.setdefault(f"{source}.{alias.name}", set())
                elif source in modules:
                    edges.setdefault(source, set()).add(alias.name)
        edges.pop(module, None)
        graph[module] = edges
    return graph


def find_cycle(graph: dict[str, dict[str, set[str]]]) -> list[str] | None:
    """One circle of imports as the modules along it (the first one repeated at the end), or None."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(module: str) -> list[str] | None:
        path.append(module)
        on_path.add(module)
        for imported in sorted(graph[module]):
            if imported in on_path:
                return [*path[path.index(imported) :], imported]
            if imported not in done:
                cycle = visit(imported)
                if cycle is not None:
                    return cycle
        path.pop()
        on_path.discard(module)
        done.add(module)
        return None

    for module in sorted(graph):
        if module not in done:
            cycle = visit(module)
            if cycle is not None:
                return cycle
    return None


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, set[str]]]:
    return import_graph(PACKAGE)


def test_the_graph_is_read_from_the_package(graph):
    # The edges this test exists for: were they not seen, "no cycle" would hold of an empty graph.
    assert "numawatch.sources" in graph["numawatch.host"]
    assert "numawatch.source" in graph["numawatch.sources.interrupts"]
    assert "numawatch.checks.registry" in graph["numawatch.checks"]
    assert "numawatch.checks.host_irq" in graph["numawatch.checks.host"]
    assert "Check" in graph["numawatch.checks.host_irq"]["numawatch.checks.check"]
    assert len(graph) > 100


def test_numawatch_has_no_import_cycle(graph):
    cycle = find_cycle(graph)

    assert cycle is None, "modules import each other: " + " -> ".join(cycle or ())


def test_no_import_inside_a_function_closes_a_cycle():
    # An import moved into a function hides a circle from the import order but not from the design: the modules
    # still need each other. (``cli`` imports what a subcommand needs when it runs; nothing imports ``cli``.)
    cycle = find_cycle(import_graph(PACKAGE, inside_functions=True))

    assert cycle is None, "modules import each other, through an import inside a function: " + " -> ".join(cycle or ())


def test_a_cycle_is_found_and_named(tmp_path):
    package = tmp_path / "numawatch"
    (package / "checks").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "host.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import numawatch.a\n")
    (package / "a.py").write_text("from numawatch.checks import registry\n")
    (package / "checks" / "__init__.py").write_text("from . import registry\n")
    (package / "checks" / "registry.py").write_text(
        "from numawatch.checks import NAME\n\ndef f():\n    import numawatch.a\n"
    )
    (package / "checks" / "b.py").write_text("try:\n    from .. import a\nexcept ImportError:\n    pass\n")

    graph = import_graph(package)

    assert graph["numawatch.host"] == {}  # TYPE_CHECKING only
    assert graph["numawatch.checks.registry"] == {"numawatch.checks": {"NAME"}}  # not the import in f
    assert set(graph["numawatch.checks.b"]) == {"numawatch.a"}
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1]
    assert sorted(cycle[1:]) == ["numawatch.checks", "numawatch.checks.registry"]
    assert set(import_graph(package, inside_functions=True)["numawatch.checks.registry"]) == {
        "numawatch.checks",
        "numawatch.a",
    }
    (package / "checks" / "registry.py").write_text("NAME = 1\n")
    assert find_cycle(import_graph(package)) is None


def private_names_of_checks(graph: dict[str, dict[str, set[str]]]) -> set[str]:
    """One line ("M takes numawatch.checks.x._name") per private name a metric module M imports from the checks."""
    return {
        f"{module} takes {imported}.{name}"
        for module, edges in graph.items()
        if module.startswith("numawatch.metrics")
        for imported, names in edges.items()
        if imported.startswith("numawatch.checks")
        for name in names
        if name.startswith("_")
    }


def test_metric_families_take_no_private_name_of_a_check(graph):
    # A check module's "_" names are its own to change; what metrics share with checks is public there, or lives in
    # a module of its domain.
    assert set() == private_names_of_checks(graph)
    assert "numawatch.checks" in graph["numawatch.metrics.host"]  # looked


def test_a_private_name_taken_from_a_check_is_named(tmp_path):
    package = tmp_path / "numawatch"
    (package / "checks").mkdir(parents=True)
    (package / "metrics").mkdir()
    for init in (package, package / "checks", package / "metrics"):
        (init / "__init__.py").write_text("")
    (package / "checks" / "host_irq.py").write_text("def _watched():\n    pass\n\ndef device_irqs():\n    pass\n")
    (package / "metrics" / "host.py").write_text("from ..checks.host_irq import _watched, device_irqs\n")
    (package / "metrics" / "gpu.py").write_text("from numawatch.checks.host_irq import device_irqs\n")

    assert private_names_of_checks(import_graph(package)) == {
        "numawatch.metrics.host takes numawatch.checks.host_irq._watched"
    }


# What a metric module may import of the checks: the evaluation and its findings (the package, check.py), and the
# registry that names the checks.
EVALUATION_MODULES = frozenset({"numawatch.checks", "numawatch.checks.check", "numawatch.checks.registry"})


def check_modules_taken_by_metrics(graph: dict[str, dict[str, set[str]]]) -> set[str]:
    """One line ("M imports numawatch.checks.x") per check module, other than ``EVALUATION_MODULES``, that a metric
    module M imports."""
    return {
        f"{module} imports {imported}"
        for module, edges in graph.items()
        if module.startswith("numawatch.metrics")
        for imported in edges
        if imported.startswith("numawatch.checks") and imported not in EVALUATION_MODULES
    }


def test_metric_families_import_no_check_module(graph):
    # A check module holds one check's logic. What a metric family shares with a check (the device IRQ join and the
    # managed IRQs, who holds a GPU, the GPU-NIC paths, the idle states a CPU may enter) lives in a module of its
    # domain that both import, so a check can change without a family changing with it.
    assert set() == check_modules_taken_by_metrics(graph)
    assert "numawatch.irqplacement" in graph["numawatch.metrics.host"]  # looked: the shared join is found there
    assert "numawatch.irqplacement" in graph["numawatch.checks.host_irq"]


def test_a_check_module_imported_by_a_metric_module_is_named(tmp_path):
    package = tmp_path / "numawatch"
    (package / "checks").mkdir(parents=True)
    (package / "metrics").mkdir()
    for init in (package, package / "checks", package / "metrics"):
        (init / "__init__.py").write_text("")
    for name in ("check", "registry", "host_irq", "cpuidle"):
        (package / "checks" / f"{name}.py").write_text("def f():\n    pass\n")
    (package / "metrics" / "host.py").write_text("from ..checks.host_irq import f\n")
    (package / "metrics" / "platform.py").write_text("from numawatch.checks import cpuidle\n")
    (package / "metrics" / "core.py").write_text(
        "from numawatch.checks import f\nfrom numawatch.checks.check import f\n"
    )
    (package / "metrics" / "drift.py").write_text("import numawatch.checks.registry\n")

    assert check_modules_taken_by_metrics(import_graph(package)) == {
        "numawatch.metrics.host imports numawatch.checks.host_irq",
        "numawatch.metrics.platform imports numawatch.checks.cpuidle",
    }
