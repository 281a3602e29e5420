"""Record which primitives the test suite lowers and which ONNX ops their rules emit.

A primitive counts as tested when a passing test ran its built-in lowering rule (per-call
``lowerings=`` overrides, plugins and rules registered by tests do not count): the "tested" column
of the support table. The ONNX ops each rule emitted (one ``primitive op_type`` line per pair, the
nodes of Loop, Scan and If bodies included) are the check on the declared ``onnx_ops=``:
``tests/test_readme.py`` asserts that every recorded op is declared, so the support table cannot
lie. The nodes of the rules a rule lowers in turn are its own too when its equation carries no code
(no jaxpr, no Python function among its params): then what it lowers is its own algorithm (svd's
Jacobi sweeps, lgamma's series, a cumprod's combiner), and every op of it is in the exported graph
because of that primitive. When the equation carries code (a ``while`` body, a ``pjit``, a coarse
op's fallback, Equinox's ``noinline``), what that code lowers belongs to its own rules. Nodes of
symbolic-dim arithmetic and of an older opset's form of an op are nobody's. ``python
scripts/gen_support_table.py --record`` runs the test suite with this module as a pytest plugin and
rewrites both committed records; with ``--record-merge`` (what the script passes for a subset of the
tests) the records of the run are added to the committed ones::

    python -m pytest -p jax2onnx_nn.testing.coverage --record-lowered tests/lowered_primitives.txt
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from jax2onnx_nn.testing.support import read_record

EMITTED_NAME = "emitted_ops.txt"  # beside the lowered record


@contextlib.contextmanager
def recording(
    seen: set[str], emitted: set[tuple[str, str]] | None = None, plumbing: set[str] | None = None
) -> Iterator[None]:
    """While active, add to ``seen`` the name of every primitive whose registered rule runs
    (or whose body is inlined), to ``emitted`` its (name, ONNX op type) pairs, and to
    ``plumbing`` the op types of the nodes that are nobody's (symbolic-dim arithmetic, an
    older opset's form of an op)."""
    from jax2onnx_nn.core import lower, registry
    from jax2onnx_nn.core.graph import GraphBuilder
    from jax2onnx_nn.core.symbolic import DimEvaluator

    original = lower.lookup
    running: list[str | None] = []  # the rule whose nodes are being added (None: dim arithmetic)
    owners: list[str] = []  # the rules running whose equations carry no code: they own every node

    def lookup(name: str, overrides: Any = None) -> Any:
        registration = original(name, overrides)
        if (overrides and name in overrides) or registry.layer_of(name) != registry.BUILTIN:
            return registration  # a test's or a plugin's rule: not what the support table records
        if registration is None:
            if name in lower.CALL_BODIES:
                seen.add(name)
            return None

        def rule(*args: Any, **params: Any) -> Any:
            seen.add(name)
            with _running(name), _owning(name, not carries_code(params)):
                return registration.rule(*args, **params)

        return dataclasses.replace(registration, rule=rule)

    @contextlib.contextmanager
    def _running(name: str | None) -> Iterator[None]:
        running.append(name)
        try:
            yield
        finally:
            running.pop()

    @contextlib.contextmanager
    def _owning(name: str, owns: bool) -> Iterator[None]:
        if owns:
            owners.append(name)
        try:
            yield
        finally:
            if owns:
                owners.pop()

    lower_call = lower.Lowerer.lower_call

    def recorded_lower_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        # an inlined call body (a jit, a recognized activation) is no rule's own: its nodes
        # belong to the rules of its equations, not to a rule whose body holds the call
        with _running(None):
            return lower_call(self, *args, **kwargs)

    add_node, dim, var = GraphBuilder.add_node, DimEvaluator.dim, DimEvaluator.var
    older_form = GraphBuilder.older_form_of

    def recorded_add_node(self: GraphBuilder, op_type: str, *args: Any, **kwargs: Any) -> Any:
        if (
            emitted is not None
            and running
            and running[-1] is not None
            and kwargs.get("domain", "") == ""
        ):
            emitted.add((running[-1], op_type))
            emitted.update((owner, op_type) for owner in owners)
        elif plumbing is not None and running and running[-1] is None:
            plumbing.add(op_type)
        return add_node(self, op_type, *args, **kwargs)

    def recorded_dim(self: DimEvaluator, d: Any) -> Any:
        with _running(None):
            return dim(self, d)

    def recorded_var(self: DimEvaluator, name: str) -> Any:
        with _running(None):
            return var(self, name)

    def unrecorded_older_form(self: GraphBuilder, *args: Any) -> Any:
        # an op written in an older opset's form is still the op the rule declares
        with _running(None):
            return older_form(self, *args)

    lower.lookup = lookup
    lower.Lowerer.lower_call = recorded_lower_call  # type: ignore[method-assign]
    GraphBuilder.add_node = recorded_add_node  # type: ignore[method-assign]
    DimEvaluator.dim = recorded_dim  # type: ignore[method-assign]
    DimEvaluator.var = recorded_var  # type: ignore[method-assign]
    GraphBuilder.older_form_of = unrecorded_older_form  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        lower.lookup = original
        lower.Lowerer.lower_call = lower_call  # type: ignore[method-assign]
        GraphBuilder.add_node = add_node  # type: ignore[method-assign]
        DimEvaluator.dim, DimEvaluator.var = dim, var  # type: ignore[method-assign]
        GraphBuilder.older_form_of = older_form  # type: ignore[method-assign]


def carries_code(params: dict[str, Any]) -> bool:
    """Whether an equation's params hold code its rule lowers or calls: a jaxpr, or a Python
    function (a callback, Equinox's ``noinline`` function), directly or in a tuple. Classes
    (dtypes given as their scalar type) are not code."""
    from jax2onnx_nn.core import jax_internals as jxi

    if jxi.subjaxprs_of(params):
        return True
    values = [
        v
        for value in params.values()
        for v in (value if isinstance(value, (tuple, list)) else (value,))
    ]
    return any(callable(v) and not isinstance(v, type) for v in values)


def read_emitted(path: pathlib.Path) -> dict[str, set[str]] | None:
    """The recorded ONNX op types per primitive, or None when there is no record."""
    if not path.exists():
        return None
    emitted: dict[str, set[str]] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, op_type = line.split()
            emitted.setdefault(name, set()).add(op_type)
    return emitted


class _Recorder:
    """Collects the primitives lowered by each test; keeps those of passing tests."""

    def __init__(self, path: pathlib.Path, *, merge: bool = False) -> None:
        self.path = path
        self.merge = merge  # add to the committed records (a subset of the tests ran)
        self.current: set[str] = set()
        self.passed: set[str] = set()
        self.current_emitted: set[tuple[str, str]] = set()
        self.emitted: set[tuple[str, str]] = set()
        self.failed = False
        self._stack = contextlib.ExitStack()

    def start(self) -> None:
        self._stack.enter_context(recording(self.current, self.current_emitted))

    def stop(self) -> None:
        self._stack.close()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.current.clear()
        self.current_emitted.clear()
        self.failed = False

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.failed = self.failed or report.failed
        if report.when == "teardown" and not self.failed:
            self.passed.update(self.current)
            self.emitted.update(self.current_emitted)

    def write(self) -> None:
        emitted_path = self.path.parent / EMITTED_NAME
        if self.merge:
            self.passed |= read_record(self.path) or set()
            self.emitted |= {
                (name, op_type)
                for name, ops in (read_emitted(emitted_path) or {}).items()
                for op_type in ops
            }
        lines = [
            "# Primitives lowered by passing tests; python scripts/gen_support_table.py --record"
        ]
        self.path.write_text("\n".join([*lines, *sorted(self.passed)]) + "\n")
        head = [
            "# ONNX ops each rule emitted in passing tests; python scripts/gen_support_table.py "
            "--record"
        ]
        pairs = [f"{name} {op_type}" for name, op_type in sorted(self.emitted)]
        emitted_path.write_text("\n".join([*head, *pairs]) + "\n")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-lowered",
        metavar="PATH",
        default=None,
        help="write the primitives lowered by passing tests to PATH",
    )
    parser.addoption(
        "--record-merge",
        action="store_true",
        help="add to the records at PATH instead of rewriting them (a subset of the tests)",
    )


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--record-lowered")
    if path and (getattr(config.option, "numprocesses", None) or hasattr(config, "workerinput")):
        raise pytest.UsageError(
            "--record-lowered records in one process: add -p no:xdist (not -n N)"
        )
    if path:
        recorder = _Recorder(pathlib.Path(path), merge=config.getoption("--record-merge"))
        config.pluginmanager.register(recorder, "jax2onnx_nn_recorder")
        config.stash[_KEY] = recorder
        recorder.start()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    recorder = session.config.stash.get(_KEY, None)
    # a complete run only (some failures allowed: their primitives are not counted)
    if recorder is not None and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        recorder.write()


def pytest_unconfigure(config: pytest.Config) -> None:
    recorder = config.stash.get(_KEY, None)
    if recorder is not None:
        recorder.stop()


_KEY = pytest.StashKey[_Recorder]()
