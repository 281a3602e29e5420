"""pytest plugin (entry point ``pytest11``): test your exports in one line.

Fixtures:

* ``assert_onnx_matches(model_or_fn, inputs, sizes=..., rtol=..., atol=..., **to_onnx_options)``
  exports, runs the ONNX checker, runs onnxruntime and compares with JAX; on a mismatch the
  test fails with a readable diff (no traceback) and the model is saved to a temporary
  folder (the path is in the message). Returns the ``onnx.ModelProto``.
* ``onnx_roundtrip(model_or_fn, inputs, ...)`` does the same without failing and returns a
  :class:`~jax2onnx_nn.testing.roundtrip.RoundTrip` (``.model``, ``.report``, ``.ok``).

Both are session-scoped, so they work inside hypothesis' ``@given`` too. Option
``--onnx-save-dir DIR`` saves every model the fixtures export (``DIR/<test>.onnx``).
"""

from __future__ import annotations

import os
import pathlib
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import onnx
import pytest

from jax2onnx_nn.testing.roundtrip import RoundTrip, roundtrip


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("jax2onnx_nn")
    group.addoption(
        "--onnx-save-dir",
        metavar="DIR",
        default=None,
        help="save every model exported by the assert_onnx_matches / onnx_roundtrip fixtures",
    )


def _current_test() -> str:
    """The running test's name, as a file name (fixtures are session-scoped so that they also
    work inside hypothesis' @given, which rejects function-scoped fixtures)."""
    current = os.environ.get("PYTEST_CURRENT_TEST", "test").split(" ")[0].split("::")[-1]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", current).strip("_") or "test"


class _Runner:
    """Runs round trips; saves models under the running test's name."""

    def __init__(self, config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.config = config
        self.tmp_path_factory = tmp_path_factory
        self.counts: Counter[str] = Counter()
        self._failures: pathlib.Path | None = None

    def __call__(
        self,
        model_or_fn: Callable[..., Any],
        inputs: Sequence[Any],
        *,
        sizes: Mapping[str, Sequence[int]] | None = None,
        rtol: float | None = None,
        atol: float | None = None,
        **options: Any,
    ) -> RoundTrip:
        result = roundtrip(model_or_fn, inputs, sizes=sizes, rtol=rtol, atol=atol, **options)
        test = _current_test()
        save_dir = self.config.getoption("--onnx-save-dir")
        if save_dir is not None:
            count = self.counts[test]
            self.counts[test] += 1
            os.makedirs(save_dir, exist_ok=True)
            result.saved_to = os.path.join(
                save_dir, f"{test}_{count}.onnx" if count else f"{test}.onnx"
            )
        elif not result.ok:  # the latest failure of a test (hypothesis' minimal example last)
            if self._failures is None:
                self._failures = self.tmp_path_factory.mktemp("onnx_failures")
            result.saved_to = str(self._failures / f"{test}.onnx")
        if result.saved_to is not None:
            onnx.save(result.model, result.saved_to)
        return result


@pytest.fixture(scope="session")
def onnx_roundtrip(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., RoundTrip]:
    """``onnx_roundtrip(model_or_fn, inputs, sizes=None, rtol=None, atol=None, **options)`` ->
    ``RoundTrip`` (``.model``, ``.report``, ``.ok``, ``.diffs``); never fails the test itself.
    ``options``: ``reference=``, ``input_values=``, ``seed=``, ``onnx_model=``, ``full_check=``
    and every option of ``to_onnx``."""
    return _Runner(pytestconfig, tmp_path_factory)


@pytest.fixture(scope="session")
def assert_onnx_matches(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., onnx.ModelProto]:
    """``assert_onnx_matches(model_or_fn, inputs, sizes=None, rtol=None, atol=None, **options)``
    -> the ``onnx.ModelProto``; fails the test with a readable diff when onnxruntime and JAX
    disagree."""
    run = _Runner(pytestconfig, tmp_path_factory)

    def check(
        model_or_fn: Callable[..., Any], inputs: Sequence[Any], **kwargs: Any
    ) -> onnx.ModelProto:
        __tracebackhide__ = True
        result = run(model_or_fn, inputs, **kwargs)
        if not result.ok:
            pytest.fail(str(result), pytrace=False)
        return result.model

    return check
