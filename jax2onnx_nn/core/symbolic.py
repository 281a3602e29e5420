"""Symbolic dims (B, 4*B, B//2, max(B, T)): what rules may assume about them, and their values
as int64 tensors computed from input shapes.

A dim variable is read once from the first graph input that has it (Shape -> Gather); a dim
expression is built from those with integer ONNX ops, once per distinct expression. The
values live in the main graph, where every body graph can see them.

The predicates below (``same_dim``, ``has_zero``, ``is_positive``) answer at export time what
is *provably* true for every value of the dim variables; a rule uses them to skip work (an
identity reshape, a whole-axis slice) and must stay correct when they answer False.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.errors import SpecError
from jax2onnx_nn.core.graph import GraphBuilder, dim_name


def same_dim(a: Any, b: Any) -> bool:
    """Provably equal dims: ints by value, symbolic dims by their normalized expression
    (``2*B`` equals ``B + B``). Dims JAX cannot prove equal (``B`` and ``T``, ``B`` and 3)
    are not the same, though they may be at run time."""
    try:
        return bool(a == b)
    except jax.errors.InconclusiveDimensionOperation:
        return False


def same_shape(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Same rank and provably equal dims (:func:`same_dim`)."""
    return len(a) == len(b) and all(map(same_dim, a, b))


def is_zero(d: Any) -> bool:
    """A dim that is statically 0. A symbolic dim is not, though it may be 0 at run time."""
    return not jxi.is_symbolic_dim(d) and int(d) == 0


def has_zero(dims: Sequence[Any]) -> bool:
    """Statically no elements: some dim is the int 0 (see :func:`is_zero`). Rules answer these
    without index arithmetic (ONNX and onnxruntime disagree on broadcasting size-0 dims)."""
    return any(map(is_zero, dims))


def is_positive(d: Any) -> bool:
    """Provably >= 1 (JAX assumes every dim variable is, so ``B`` and ``2*B`` are; ``B - 1``
    is not)."""
    try:
        return bool(d >= 1)
    except jax.errors.InconclusiveDimensionOperation:
        return False


class DimEvaluator:
    def __init__(self, builder: GraphBuilder) -> None:
        self.builder = builder
        self._sources: dict[str, tuple[ir.Value, int]] = {}
        self._cache: dict[str, ir.Value] = {}

    def add_source(self, value: ir.Value, shape: tuple[Any, ...]) -> None:
        """Remember where each dim variable of an input can be read at run time."""
        for axis, d in enumerate(shape):
            if jxi.is_symbolic_dim(d):
                for var in jxi.dim_vars(d):
                    if var not in self._sources and str(d) == var:
                        self._sources[var] = (value, axis)

    def known_vars(self) -> set[str]:
        return set(self._sources)

    def var(self, name: str) -> ir.Value:
        """The int64 tensor of shape [1] holding the dim variable ``name``."""
        return self._var(name)

    def dim(self, d: Any) -> ir.Value:
        """An int64 tensor of shape [1] holding the dim ``d`` (int or symbolic)."""
        b = self.builder
        if not jxi.is_symbolic_dim(d):
            return b.const(np.array([int(d)], dtype=np.int64))
        key = dim_name(d)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._evaluate(d)
            self._cache[key] = cached
        return cached

    def _scope(self) -> Any:
        """Dim nodes are named dims/...; nested evaluations do not repeat the scope."""
        b = self.builder
        return contextlib.nullcontext() if b.scope[-1:] == ["dims"] else b.name_scope("dims")

    def _var(self, name: str) -> ir.Value:
        if name in self._cache:
            return self._cache[name]
        if name not in self._sources:
            raise SpecError(
                f"the symbolic dim {name!r} cannot be read from any input shape; every dim "
                f"variable must appear alone as a dim of some input (e.g. give an input the "
                f"shape ({name!r}, ...) rather than only expressions such as '2*{name}')"
            )
        value, axis = self._sources[name]
        b = self.builder
        with self._scope():
            shape = b.op.Shape(value, start=axis, end=axis + 1, _name=f"shape_{name}")
        self._cache[name] = shape
        return shape

    def _evaluate(self, d: Any) -> ir.Value:
        b = self.builder
        total: ir.Value | None = None
        constant = 0
        with self._scope():
            for factors, coeff in jxi.dim_structure(d):
                if not factors:
                    constant += coeff
                    continue
                term: ir.Value | None = None
                for factor, exponent in factors:
                    v = self._factor(factor)
                    for _ in range(exponent):
                        term = v if term is None else b.op.Mul(term, v)
                if coeff != 1:
                    term = b.op.Mul(term, b.const(np.array([coeff], np.int64)))
                total = term if total is None else b.op.Add(total, term)
            if total is None:
                return b.const(np.array([constant], np.int64))
            if constant:
                total = b.op.Add(total, b.const(np.array([constant], np.int64)))
        return total

    def _factor(self, factor: Any) -> ir.Value:
        var = jxi.factor_var(factor)
        if var is not None:
            return self._var(var)
        operation, operands = jxi.factor_operation(factor)
        a, c = (self.dim(o) for o in operands)
        b = self.builder
        if operation == "floordiv":  # floor division, Python semantics, exact for any sign
            return b.op.Div(b.op.Sub(a, b.op.Mod(a, c)), c)
        if operation == "mod":
            return b.op.Mod(a, c)
        if operation == "max":
            return b.op.Max(a, c)
        if operation == "min":
            return b.op.Min(a, c)
        raise NotImplementedError(f"symbolic dim operation {operation!r}")
