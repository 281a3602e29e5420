"""The package's layers: no import cycle among its modules, and core names no framework."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "jax2onnx_nn"


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_time_nodes(body):
    """Statements run when the module is imported (function bodies are not)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            yield from _import_time_nodes(getattr(node, field, []) or [])


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports while being imported."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, set())
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _import_time_nodes(ast.parse(path.read_text()).body):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            edges.update(t for t in targets if t in modules and t != name)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_import_graph_is_read():
    graph = import_graph()
    assert "jax2onnx_nn.core.lower" in graph["jax2onnx_nn.core.api"]
    assert "jax2onnx_nn.core.session" in graph["jax2onnx_nn.core.functions"]


def test_no_import_cycle_among_the_package_modules():
    assert _cycle(import_graph()) is None


def test_a_cycle_would_be_found():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def _adapter_packages() -> list[str]:
    """The package's adapters: every subpackage but core and testing (flax, equinox, keras),
    and Linen, which the flax adapter serves by mode flags."""
    subpackages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert {"flax", "equinox", "keras"} <= set(subpackages)
    return [f"jax2onnx_nn.{name}" for name in subpackages if name not in ("core", "testing")] + ["jax2onnx_nn.linen"]


def test_core_names_no_framework_adapter():
    adapters = _adapter_packages()
    for path in (PACKAGE / "core").rglob("*.py"):
        text = path.read_text()
        assert not [a for a in adapters if a in text], path
    graph = import_graph()
    core = [m for m in graph if m.startswith("jax2onnx_nn.core")]
    assert all(not t.startswith(tuple(adapters)) for m in core for t in graph[m])
