"""Complex numbers as real (real, imag) pairs: which ops act on the pairs as they are, and the
table of complex arithmetic written as JAX code on the pairs.

onnxruntime has no complex kernels, so a complex array of shape ``S`` is held as a float
array of shape ``(*S, 2)`` (complex64 -> float32, complex128 -> float64), inside the graph
and at its inputs and outputs. The interpreter lowers an equation on complex values in one
of two ways, both as a jaxpr on the pairs that the ordinary real rules then lower:

* :data:`PAIRWISE` primitives (every rearranging op, and the linear ones: add, sub, neg,
  reduce_sum, cumsum, ...) compute the real and the imaginary part independently, so they
  are the same primitive vmapped over the trailing pair dim (``jax_internals.data_jaxpr``);
  no rule of their own.
* every other primitive has an entry in the table of :func:`pair_impl`: a JAX function
  from pairs to pairs (``mul``: four real products), traced on the pairs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jax2onnx_nn.core import jax_internals as jxi

PairImpl = Callable[..., Any]  # impl(*operands_as_pairs, avals_in=..., avals_out=..., **params)

# Primitives that act on the real and imaginary parts independently: f(x + iy) = f(x) + i f(y).
PAIRWISE: frozenset[str] = frozenset(
    {
        "reshape",
        "transpose",
        "broadcast_in_dim",
        "squeeze",
        "expand_dims",
        "concatenate",
        "pad",
        "slice",
        "dynamic_slice",
        "dynamic_update_slice",
        "gather",
        "scatter",
        "scatter-add",
        "scatter_add",
        "scatter-sub",
        "scatter_sub",
        "select_n",
        "rev",
        "copy",
        "copy_p",
        "split",
        "add",
        "add_any",
        "sub",
        "neg",
        "reduce_sum",
        "cumsum",
        "sharding_constraint",
        "optimization_barrier",
        "reduce_precision",
    }
)

_IMPLS: dict[str, PairImpl] = {}


def pair_impl(*names: str) -> Callable[[PairImpl], PairImpl]:
    """Register ``impl`` as what the primitives ``names`` compute on complex operands.

    The impl gets complex operands as float pairs (trailing dim 2) and real ones as they are,
    the equation's params as keywords plus ``avals_in`` / ``avals_out``, and returns the
    results the same way. Example::

        @pair_impl("conj")
        def _conj(x, *, input_dtype, avals_in, avals_out):
            return x * jnp.array([1, -1], x.dtype)
    """

    def decorate(impl: PairImpl) -> PairImpl:
        for name in names:
            _IMPLS[name] = impl
        return impl

    return decorate


def touches_complex(eqn: Any) -> bool:
    return any(jxi.is_complex_dtype(v.aval.dtype) for v in (*eqn.invars, *eqn.outvars))


def pairs_jaxpr(eqn: Any) -> Any | None:
    """The equation as a jaxpr on float pairs, or None when no lowering on pairs is known."""
    name = eqn.primitive.name
    impl = _IMPLS.get(name)
    if impl is not None:
        avals_in = [v.aval for v in eqn.invars]
        avals_out = [v.aval for v in eqn.outvars]

        def fn(*args: Any) -> Any:
            return impl(*args, avals_in=avals_in, avals_out=avals_out, **eqn.params)

        return jxi.trace_on_data(eqn, fn, avals_in)
    if name in PAIRWISE:
        return jxi.data_jaxpr(eqn)
    return None


def impl_of(name: str) -> PairImpl | None:
    """The pair impl registered for the primitive ``name``, if any."""
    return _IMPLS.get(name)


def supported() -> list[str]:
    """Primitive names lowered on complex operands (for the support table)."""
    return sorted(PAIRWISE | set(_IMPLS))
