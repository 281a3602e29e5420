"""Record which primitives the test suite lowers: the "tested" column of the support table.

A primitive counts as tested when a passing test ran its registered lowering rule (per-call
``lowerings=`` overrides do not count). ``python scripts/gen_support_table.py --record`` runs
the test suite with this module as a pytest plugin and rewrites the committed record::

    python -m pytest -p jax2onnx_nn.testing.coverage --record-lowered tests/lowered_primitives.txt
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest


@contextlib.contextmanager
def recording(seen: set[str]) -> Iterator[None]:
    """While active, add to ``seen`` the name of every primitive whose registered rule runs
    (or whose body is inlined)."""
    from jax2onnx_nn.core import lower

    original = lower.lookup

    def lookup(name: str, overrides: Any = None) -> Any:
        registration = original(name, overrides)
        if overrides and name in overrides:
            return registration
        if registration is None:
            if name in lower.CALL_BODIES:
                seen.add(name)
            return None

        def rule(*args: Any, **kwargs: Any) -> Any:
            seen.add(name)
            return registration.rule(*args, **kwargs)

        return dataclasses.replace(registration, rule=rule)

    lower.lookup = lookup
    try:
        yield
    finally:
        lower.lookup = original


class _Recorder:
    """Collects the primitives lowered by each test; keeps those of passing tests."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        self.current: set[str] = set()
        self.passed: set[str] = set()
        self.failed = False
        self._stack = contextlib.ExitStack()

    def start(self) -> None:
        self._stack.enter_context(recording(self.current))

    def stop(self) -> None:
        self._stack.close()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.current.clear()
        self.failed = False

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.failed = self.failed or report.failed
        if report.when == "teardown" and not self.failed:
            self.passed.update(self.current)

    def write(self) -> None:
        lines = ["# Primitives lowered by passing tests; python scripts/gen_support_table.py --record"]
        self.path.write_text("\n".join([*lines, *sorted(self.passed)]) + "\n")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-lowered", metavar="PATH", default=None, help="write the primitives lowered by passing tests to PATH")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--record-lowered")
    if path:
        recorder = _Recorder(pathlib.Path(path))
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
