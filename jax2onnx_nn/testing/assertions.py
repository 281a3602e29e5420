"""``assert_exports_match``: export, check, run onnxruntime, compare with JAX, in one call."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np
import onnx

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.config import checked_options
from jax2onnx_nn.testing.roundtrip import roundtrip


@checked_options(roundtrip)
def assert_exports_match(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    *,
    sizes: Mapping[str, Sequence[int]] | None = None,
    input_values: Sequence[Any] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    enable_double_precision: bool = False,
    seed: int = 0,
    reference_device: str = "cpu",
    **to_onnx_options: Any,
) -> onnx.ModelProto:
    """Export ``fn``, validate the model with the ONNX checker, and compare onnxruntime with JAX.

    ``input_values`` (flat, in input order) are used as given; otherwise random inputs are drawn
    for every size in ``sizes``. Raises AssertionError with a per-output table and the largest
    element differences on mismatch. JAX's reference is computed on the CPU
    (``reference_device="default"``: on JAX's default device; see :func:`jax2onnx_nn.verify`).
    Returns the model so tests can assert properties of the graph too.

    Example::

        model = assert_exports_match(
            lambda x: jnp.cumsum(x, axis=1), [("B", 5)], sizes={"B": [1, 4]}
        )
        assert op_types(model) == ["CumSum"]
    """
    __tracebackhide__ = True
    result = roundtrip(
        fn,
        inputs,
        sizes=sizes,
        input_values=input_values,
        rtol=rtol,
        atol=atol,
        seed=seed,
        enable_double_precision=enable_double_precision,
        reference_device=reference_device,
        **to_onnx_options,
    )
    result.raise_if_failed()
    return result.model


@checked_options(roundtrip)
def assert_exports_match_on(
    fn: Callable[..., Any],
    *values: Any,
    enable_double_precision: bool | None = None,
    **options: Any,
) -> onnx.ModelProto:
    """:func:`assert_exports_match` for the shapes and dtypes of ``values`` (arrays, PRNG keys,
    or pytrees of them), compared on exactly these values: what a property test draws.

    Double precision is enabled when any value is 64-bit, unless ``enable_double_precision``
    says otherwise.

    Example::

        assert_exports_match_on(jnp.cumsum, np.array([1.0, np.nan, 2.0], np.float32))
    """
    __tracebackhide__ = True
    values = jax.tree_util.tree_map(lambda v: v if _is_key(v) else np.asarray(v), values)
    leaves = jax.tree_util.tree_leaves(values)
    if enable_double_precision is None:
        enable_double_precision = any(
            not _is_key(v) and jxi.real_dtype(v.dtype).itemsize == 8 for v in leaves
        )
    return assert_exports_match(
        fn,
        list(values),
        input_values=leaves,
        enable_double_precision=enable_double_precision,
        **options,
    )


def _is_key(value: Any) -> bool:
    return hasattr(value, "dtype") and jxi.is_key_dtype(value.dtype)


def op_types(model: onnx.ModelProto, *, nested: bool = False) -> list[str]:
    """The op types of the main graph's nodes, in order; with ``nested``, each followed by
    those of its bodies (If branches, Loop and Scan bodies), depth first."""
    if not nested:
        return [n.op_type for n in model.graph.node]
    ops: list[str] = []

    def walk(nodes: Any) -> None:
        for node in nodes:
            ops.append(node.op_type)
            for attr in node.attribute:
                for graph in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                    walk(graph.node)

    walk(model.graph.node)
    return ops
