"""The check the runtime-flag tests share: one export with the flag a graph input, compared
with JAX for the flag true and false."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import onnx

from jax2onnx_nn import to_onnx, verify


def assert_flag_switches(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    flag: str,
    *,
    sizes: Mapping[str, Sequence[int]] | None = None,
) -> onnx.ModelProto:
    """One export with ``flag`` a graph input; onnxruntime matches JAX for the flag true and
    false at every size (default ``B`` = 2 and 7; random inputs and keys per run; bool outputs
    such as a Dropout's kept-elements mask exactly)."""
    model = to_onnx(fn, inputs, input_params={flag: True})
    onnx.checker.check_model(model, full_check=True)
    assert model.graph.input[-1].name == flag
    for value in (True, False):
        verify(
            fn,
            model,
            inputs,
            input_params={flag: value},
            sizes={"B": [2, 7]} if sizes is None else sizes,
        ).raise_if_failed()
    return model


def with_mask(y: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A Dropout output and which elements it kept (compared bit for bit; the kept values are
    ``x / keep``, which XLA and onnxruntime may round an ulp apart)."""
    return y, y != 0
