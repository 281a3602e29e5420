"""The package's layers: no import cycle among its modules (imports inside functions count),
no module takes another's private names, and core names no framework."""

import ast
import pathlib
from collections.abc import Iterator

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "jax2onnx_nn"


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST, package: str) -> Iterator[tuple[ast.AST, str, list[str]]]:
    """Every import statement of a module, those inside functions too (a lazy import closes a
    cycle as surely as one at the top): (node, the module imported from, the names taken)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            yield node, base, [a.name for a in node.names]


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports, anywhere in its text."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, set())
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for _, base, names in _imports(ast.parse(path.read_text()), package):
            targets = [f"{base}.{n}" if f"{base}.{n}" in modules else base for n in names] or [base]
            edges.update(t for t in targets if t in modules and t != name)
    return graph


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports() -> list[str]:
    """``module: name`` for each private name a package module takes from another one: by
    ``from x import _name``, or as ``x._name`` / ``Class._name`` on a module or class it
    imported from the package."""
    found = []
    for name, path in _modules().items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        bound: set[str] = set()
        for node, base, names in _imports(tree, package):
            if not base.startswith("jax2onnx_nn"):
                continue
            found += [f"{name}: {base}.{n}" for n in names if _is_private(n)]
            aliases = node.names  # type: ignore[attr-defined]
            bound.update(a.asname or a.name.split(".")[0] for a in aliases)
        found += [
            f"{name}: {node.value.id}.{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
            and _is_private(node.attr)
        ]
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
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


def test_an_import_inside_a_function_is_an_edge():
    # the composition root imports the lowering families; the registry imports none of them
    graph = import_graph()
    assert "jax2onnx_nn.core.lowerings" in graph["jax2onnx_nn"]
    assert not {t for t in graph["jax2onnx_nn.core.registry"] if ".lowerings" in t}
    tree = ast.parse("def f():\n    from jax2onnx_nn.core import lower\n")
    assert [base for _, base, _ in _imports(tree, "jax2onnx_nn")] == ["jax2onnx_nn.core"]


def test_no_module_imports_another_modules_private_names():
    assert private_imports() == []


def test_a_cycle_would_be_found():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def _adapter_packages() -> list[str]:
    """The package's adapters: every subpackage but core and testing (flax, equinox, keras),
    and Linen, which the flax adapter serves by mode flags."""
    subpackages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert {"flax", "equinox", "keras"} <= set(subpackages)
    return [f"jax2onnx_nn.{name}" for name in subpackages if name not in ("core", "testing")] + [
        "jax2onnx_nn.linen"
    ]


def test_core_names_no_framework_adapter():
    adapters = _adapter_packages()
    for path in (PACKAGE / "core").rglob("*.py"):
        text = path.read_text()
        assert not [a for a in adapters if a in text], path
    graph = import_graph()
    core = [m for m in graph if m.startswith("jax2onnx_nn.core")]
    assert all(not t.startswith(tuple(adapters)) for m in core for t in graph[m])


MAX_LINES = 800


def long_modules(package: pathlib.Path = PACKAGE) -> list[str]:
    """``path: lines`` for each module of ``package`` longer than :data:`MAX_LINES`."""
    found = []
    for path in sorted(package.rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES:
            found.append(f"{path.relative_to(package.parent).as_posix()}: {lines}")
    return found


def test_no_module_is_longer_than_800_lines():
    # a module that long holds more than one idea: split it along its seams (a package of
    # one module per family, as equinox/coarse/ and core/jax_nn/ are)
    assert long_modules() == []


def test_a_long_module_would_be_found(tmp_path):
    package = tmp_path / "jax2onnx_nn"
    (package / "core").mkdir(parents=True)
    (package / "core" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (package / "short.py").write_text("x = 1\n" * MAX_LINES)
    assert long_modules(package) == [f"jax2onnx_nn/core/long.py: {MAX_LINES + 1}"]


JAX_INTERNALS = "jax2onnx_nn.core.jax_internals"


def jax_private_imports(tree: ast.AST, package: str) -> list[str]:
    """What a module imports from JAX's private ``jax._src`` (imports anywhere in it)."""
    found = []
    for _, base, names in _imports(tree, package):
        if base == "jax._src" or base.startswith("jax._src."):
            found.append(base)
        elif base == "jax" and "_src" in names:
            found.append("jax._src")
    return found


def test_only_jax_internals_touches_jax_internals():
    # every use of JAX internals lives in core/jax_internals.py (one module for JAX 0.10 and
    # 0.12): a JAX upgrade touches that module only
    users = {}
    for name, path in _modules().items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        users[name] = jax_private_imports(ast.parse(path.read_text()), package)
    assert users.pop(JAX_INTERNALS)
    assert {name: found for name, found in users.items() if found} == {}


def test_an_import_of_jax_internals_would_be_found():
    text = (
        "from jax import _src\ndef f():\n    from jax._src.lax import lax\nimport jax._src.core\n"
    )
    found = jax_private_imports(ast.parse(text), "jax2onnx_nn")
    assert sorted(found) == ["jax._src", "jax._src.core", "jax._src.lax"]
    assert jax_private_imports(ast.parse("import jax.extend\nfrom jax import lax\n"), "x") == []
