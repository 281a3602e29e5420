"""Hypothesis strategies for export tests: input specs with symbolic dims, and arrays for them.

Example::

    from hypothesis import given, strategies as st
    from jax2onnx_nn.testing import strategies as j2o

    @given(data=st.data(), specs=j2o.input_specs(num_inputs=2, same_shape=True))
    def test_add(data, specs, assert_onnx_matches):
        sizes = data.draw(j2o.sizes_for(specs))
        values = data.draw(j2o.inputs_for(specs, sizes))
        assert_onnx_matches(jnp.add, specs, input_values=values)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

try:
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
except ImportError as err:  # the plugin works without hypothesis; these helpers do not
    raise ImportError(
        "jax2onnx_nn.testing.strategies needs hypothesis: pip install hypothesis"
    ) from err

import jax
import numpy as np

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.specs import parse_specs
from jax2onnx_nn.testing.roundtrip import dim_names_of

FLOAT = "float32"


@st.composite
def shapes(
    draw: st.DrawFn,
    *,
    min_dims: int = 0,
    max_dims: int = 4,
    min_side: int = 0,
    max_side: int = 5,
    dim_names: Sequence[str] = ("B", "T"),
) -> tuple[int | str, ...]:
    """A shape spec: each dim an int in ``[min_side, max_side]`` or one of ``dim_names``."""
    rank = draw(st.integers(min_dims, max_dims))
    dim = st.integers(min_side, max_side)
    if dim_names:
        dim = dim | st.sampled_from(list(dim_names))
    return tuple(draw(st.lists(dim, min_size=rank, max_size=rank)))


@st.composite
def input_specs(
    draw: st.DrawFn,
    *,
    num_inputs: int | st.SearchStrategy[int] = 1,
    min_dims: int = 0,
    max_dims: int = 4,
    min_side: int = 0,
    max_side: int = 5,
    dim_names: Sequence[str] = ("B", "T"),
    dtypes: Sequence[str] = (FLOAT,),
    same_shape: bool = False,
) -> list[Any]:
    """A list of input specs for ``to_onnx``: shape tuples with symbolic dims by name
    (``("B", 3)``), as ``(shape, dtype)`` pairs for dtypes other than float32.

    ``same_shape`` gives every input the same shape (for elementwise functions); otherwise
    the shapes are independent, but equal names still mean equal dims.
    """
    n = draw(num_inputs) if isinstance(num_inputs, st.SearchStrategy) else num_inputs
    shape_of = shapes(
        min_dims=min_dims,
        max_dims=max_dims,
        min_side=min_side,
        max_side=max_side,
        dim_names=dim_names,
    )
    shared = draw(shape_of) if same_shape else None
    specs = []
    for _ in range(n):
        shape = shared if shared is not None else draw(shape_of)
        dtype = draw(st.sampled_from(list(dtypes)))
        specs.append(shape if dtype == FLOAT else (shape, dtype))
    return specs


def sizes_for(
    specs: Sequence[Any], *, min_size: int = 1, max_size: int = 5
) -> st.SearchStrategy[dict[str, int]]:
    """A value for every symbolic dim of ``specs`` (symbolic dims are >= 1)."""
    names = dim_names_of(specs)
    return st.fixed_dictionaries({name: st.integers(max(min_size, 1), max_size) for name in names})


def arrays_for(
    spec: Any,
    sizes: Mapping[str, int] | None = None,
    *,
    elements: st.SearchStrategy[Any] | None = None,
    enable_double_precision: bool = False,
) -> st.SearchStrategy[np.ndarray]:
    """Arrays matching one input spec, symbolic dims set from ``sizes`` (unnamed: 3).

    Floats are finite and normal by default (no NaN/inf, no subnormals, which XLA on CPU
    flushes to zero; pass ``elements`` for other values), complex
    numbers are pairs of such floats (:func:`complex_numbers`); ints and bools cover their
    whole range.
    """
    (leaf,) = _structs([spec], enable_double_precision)
    shape = tuple(jxi.evaluate_dim(d, dict(sizes or {}), 3) for d in leaf.shape)
    dtype = np.dtype(leaf.dtype)
    if elements is None and dtype.kind == "f":
        # no subnormals: XLA on CPU flushes them to zero (inputs and results), onnxruntime
        # computes with them, so a subnormal input is a difference of runtimes, not of the export
        elements = st.floats(
            allow_nan=False,
            allow_infinity=False,
            allow_subnormal=False,
            width=min(dtype.itemsize * 8, 64),
        )
    if elements is None and dtype.kind == "c":
        elements = complex_numbers(dtype)
    return hnp.arrays(dtype, shape, elements=elements)


def complex_numbers(
    dtype: Any = np.complex64,
    *,
    min_value: float | None = None,
    max_value: float | None = None,
    allow_special: bool = False,
) -> st.SearchStrategy[complex]:
    """Complex numbers of ``dtype`` as pairs of floats of its part width, each part in
    ``[min_value, max_value]`` (default: any finite float), no subnormals (XLA on CPU flushes
    them); ``allow_special`` adds infinite, NaN and signed-zero parts."""
    width = np.finfo(dtype).bits
    part = st.floats(
        min_value,
        max_value,
        width=width,  # type: ignore[arg-type]  # 16, 32 or 64: a float dtype
        allow_nan=False,
        allow_infinity=False,
        allow_subnormal=False,
    )
    if allow_special:
        part = part | st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan])
    return st.builds(complex, part, part)


def inputs_for(
    specs: Sequence[Any],
    sizes: Mapping[str, int] | None = None,
    *,
    elements: st.SearchStrategy[Any] | None = None,
    enable_double_precision: bool = False,
) -> st.SearchStrategy[list[np.ndarray]]:
    """One array per spec (flat), for ``input_values=`` of the test helpers."""
    return st.tuples(
        *(
            arrays_for(s, sizes, elements=elements, enable_double_precision=enable_double_precision)
            for s in specs
        )
    ).map(list)


def _structs(specs: Sequence[Any], enable_double_precision: bool = False) -> list[Any]:
    parsed = parse_specs(list(specs), enable_double_precision=enable_double_precision, warn=False)
    return jax.tree_util.tree_leaves(parsed.args)


__all__ = [
    "arrays_for",
    "complex_numbers",
    "dim_names_of",
    "input_specs",
    "inputs_for",
    "shapes",
    "sizes_for",
]
