"""The interpreter: walks a jaxpr, keeps Var -> ir.Value, dispatches each equation to its rule.

This is the only module that knows what a jaxpr looks like. It solves once what every rule
would otherwise re-do: literals and closed-over constants become ONNX constants, call-like
primitives (jit, custom_jvp/vjp, remat, closed_call) are inlined, primitives defined by
libraries are lowered through their own JAX implementation, and the dtype and shape of every
equation output are stamped from the jaxpr's avals.
"""

from __future__ import annotations

import ctypes
import functools
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import jax
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import complex as complex_pairs
from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core import value_range
from jax2onnx_nn.core.config import ExportConfig
from jax2onnx_nn.core.errors import ON_COMPLEX, ConversionError
from jax2onnx_nn.core.graph import (
    GraphBuilder,
    dim_name,
    ir_dtype,
    ir_shape,
    numpy_tensor,
    set_type,
)
from jax2onnx_nn.core.ir.values import numpy_dtype
from jax2onnx_nn.core.jax_types import Aval, ClosedJaxpr, Dim, Dims, Eqn, avals
from jax2onnx_nn.core.opset_forms import has_op
from jax2onnx_nn.core.progress import Progress
from jax2onnx_nn.core.registry import Registration, lookup
from jax2onnx_nn.core.symbolic import DimEvaluator, is_positive, is_zero
from jax2onnx_nn.core.targets import Target

# Call-like primitives whose body is lowered inline, with the param that holds the body.
CALL_BODIES: dict[str, tuple[str, ...]] = {
    "pjit": ("jaxpr",),
    "jit": ("jaxpr",),
    "closed_call": ("call_jaxpr",),
    "core_call": ("call_jaxpr",),
    "call": ("call_jaxpr",),
    "custom_jvp_call": ("call_jaxpr",),
    "custom_vjp_call": ("call_jaxpr", "fun_jaxpr"),
    "custom_vjp_call_jaxpr": ("fun_jaxpr", "call_jaxpr"),
    "remat": ("jaxpr",),
    "checkpoint": ("jaxpr",),
    "custom_lin": ("jaxpr",),
}


def onnx_aval(aval: Aval) -> tuple[np.dtype, Dims]:
    """The ONNX dtype and shape a JAX aval is represented by: keys become their uint32 data,
    complex numbers real (real, imag) pairs in a trailing dim of 2."""
    dtype = aval.dtype
    if isinstance(dtype, np.dtype) and dtype.kind != "c":  # the common case, once per value made
        return dtype, tuple(aval.shape)
    struct = jxi.data_struct(aval)
    return np.dtype(struct.dtype), tuple(struct.shape)


OnnxType = tuple[np.dtype, Sequence[Any] | None]
"""A value's ONNX element type and shape (ints, dim names or symbolic dims; None: unknown)."""

# An index of the toolkit: a static int, or an int64 tensor of shape [1] (``ctx.dim``).
Index = int | ir.Value
_IOTA_CONSTANT_MAX = 1024  # longer iotas are a Range node, not a stored constant


def is_float(dtype: Any) -> bool:
    """A floating-point type, bfloat16 and the float8 types included (NumPy's own
    ``issubdtype(..., np.floating)`` does not know them)."""
    return bool(jax.dtypes.issubdtype(dtype, np.floating))


_NO_PAIRS = object()  # a complex op that has no lowering on (real, imag) pairs


def device_tensor(array: Any) -> ir.LazyTensor:
    """A weight held in device memory as a tensor whose bytes are copied to the host each time
    they are read (when the file is written: one weight at a time) and not kept: exporting a
    model whose weights live on an accelerator, or are sharded over devices, needs host memory
    for one weight, not for all of them."""
    dtype, shape = onnx_aval(array)

    def fetch() -> ir.Tensor:
        _release_freed_memory()  # the weights fetched before this one (written by now)
        return ir.Tensor(jxi.fetched_data(array))

    return ir.LazyTensor(fetch, dtype=ir_dtype(dtype), shape=ir_shape(shape))


def _release_freed_memory() -> None:
    """Give the pages of freed host buffers back to the system (glibc's ``malloc_trim``).

    glibc raises its mmap threshold each time a large mmapped buffer is freed, so after the
    first weights the copies come from the heap, whose freed pages it keeps: without this a
    CPU export of 200 MB of sharded weights peaked at 0.78x their bytes, with it 0.06x."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to do
        return None


class Lowerer:
    """State of one export: the root builder, symbolic dims, unsupported primitives seen."""

    def __init__(self, builder: GraphBuilder, config: ExportConfig) -> None:
        self.root = builder
        self.config = config
        self.progress = Progress(config.progress)
        self._lowering = (
            False  # inside the top-level jaxpr (its equations are what progress counts)
        )
        self.dims = DimEvaluator(builder)
        self.unsupported: dict[str, list[str]] = defaultdict(list)
        self._consts: dict[int, tuple[Any, ir.Value]] = {}
        self.const_names: dict[int, str] = {}  # id(array) -> initializer name, from adapters
        self.functions: dict[Any, Any] = {}  # ONNX functions emitted so far (core/functions.py)

    # -- constants ------------------------------------------------------------------------
    def constant(self, value: Any, builder: GraphBuilder) -> ir.Value:
        """A closed-over array (a weight) as an initializer, one per distinct array."""
        hit = self._consts.get(id(value))
        if hit is not None and not builder.isolated:
            return hit[1]
        small = np.size(value) <= 16 and id(value) not in self.const_names
        if not small and not builder.isolated and jxi.held_off_host(value):
            # copied from its device(s) when it is written, then freed: not all at once here
            name = self.const_names.get(id(value), "weight")
            result = builder.initializer(device_tensor(value), name)
        elif small or builder.isolated:
            result = builder.const(jxi.to_data(value))
        else:
            name = self.const_names.get(id(value), "weight")
            result = builder.initializer(jxi.to_data(value), name)
        if not builder.isolated:
            self._consts[id(value)] = (value, result)  # holding value keeps id() unique
        return result

    def literal(self, atom: Any, builder: GraphBuilder) -> ir.Value:
        return builder.const(
            jxi.to_data(np.asarray(jxi.literal_value(atom), dtype=atom.aval.dtype))
        )

    # -- jaxprs ---------------------------------------------------------------------------
    def lower_jaxpr(
        self,
        closed_jaxpr: ClosedJaxpr,
        inputs: Sequence[ir.Value],
        builder: GraphBuilder,
        used_outputs: Sequence[bool] | None = None,
    ) -> list[ir.Value]:
        """Lower a (closed or open) jaxpr into ``builder``; returns its output values (one no
        node makes for an output ``used_outputs`` marks unused). Only the equations the used
        outputs need are lowered, their dead results ``DropVar`` (``jxi.live_equations``)."""
        closed = jxi.as_closed(closed_jaxpr)
        jaxpr = closed.jaxpr
        env: dict[Any, ir.Value] = {}

        def read(atom: Any) -> ir.Value:
            if jxi.is_literal(atom):
                return self.literal(atom, builder)
            return env[atom]

        for var, const in zip(jaxpr.constvars, closed.consts, strict=True):
            env[var] = self.constant(const, builder)
        if len(inputs) != len(jaxpr.invars):
            raise ValueError(f"jaxpr takes {len(jaxpr.invars)} inputs, got {len(inputs)}")
        env.update(zip(jaxpr.invars, inputs, strict=True))
        top = builder is self.root and not self._lowering
        self._lowering = True
        eqns = jxi.live_equations(jaxpr, used_outputs)
        for i, eqn in enumerate(eqns):
            if top:
                self.progress.update("lowering equations", i, len(eqns))
            outs = self.lower_eqn(eqn, [read(a) for a in eqn.invars], builder)
            for var, value in zip(eqn.outvars, outs, strict=True):
                if not isinstance(var, jxi.DropVar):
                    env[var] = value
        if used_outputs is None:
            return [read(a) for a in jaxpr.outvars]
        return [
            read(a) if u else _unmade(builder)
            for a, u in zip(jaxpr.outvars, used_outputs, strict=True)
        ]

    def lower_eqn(self, eqn: Eqn, inputs: list[ir.Value], builder: GraphBuilder) -> list[ir.Value]:
        scope = jxi.name_stack(eqn)  # jax.named_scope / module paths from adapters
        if scope:
            with builder.name_scope(scope):
                return self._lower_eqn(eqn, inputs, builder)
        return self._lower_eqn(eqn, inputs, builder)

    def _lower_eqn(self, eqn: Eqn, inputs: list[ir.Value], builder: GraphBuilder) -> list[ir.Value]:
        name = eqn.primitive.name
        registration = lookup(name, self.config.lowerings)
        previous_doc = builder.doc_string
        # library code (a body traced inside jnp/equinox functions): the caller's line
        builder.doc_string = (
            jxi.source_line(eqn) or previous_doc or jxi.source_line(eqn, library_ok=True)
        )
        try:
            data_jaxpr = self._on_data(eqn, registration)
            ctx = LoweringContext(self, eqn, builder)
            # results the value ranges of the inputs settle (core/value_range.py)
            ranges = value_range.facts(eqn, inputs)
            folded = (
                None if data_jaxpr is not None else value_range.fold(eqn, inputs, ranges, ctx.full)
            )
            if folded is not None:
                outs = folded
            elif data_jaxpr is _NO_PAIRS:
                self.unsupported[name + ON_COMPLEX].append(builder.doc_string)
                outs = [
                    ir.Value(name=builder.names.fresh(f"unsupported_{name}")) for _ in eqn.outvars
                ]
            elif data_jaxpr is not None:
                outs = self.lower_jaxpr(data_jaxpr, inputs, builder)
            elif registration is not None and registration.min_opset <= self.config.opset_version:
                result = registration.rule(ctx, *inputs, **eqn.params)
                outs = [result] if isinstance(result, ir.Value) else list(result)
            elif name in CALL_BODIES or jxi.is_body_primitive(eqn.primitive):
                # no rule, or the rule needs a newer opset: the body is what it computes
                outs = self.lower_call(eqn, inputs, builder)
            else:
                impl = jxi.primitive_impl_jaxpr(
                    eqn.primitive, eqn.params, [v.aval for v in eqn.invars]
                )
                if impl is not None:
                    outs = self.lower_jaxpr(impl, inputs, builder)
                else:
                    self.unsupported[name].append(builder.doc_string)
                    outs = [
                        ir.Value(name=builder.names.fresh(f"unsupported_{name}"))
                        for _ in eqn.outvars
                    ]
        finally:
            builder.doc_string = previous_doc
        if len(outs) != len(eqn.outvars):
            raise _rule_bug(eqn, f"returned {len(outs)} values for {len(eqn.outvars)} outputs")
        read = zip(ctx.used_outputs, outs, strict=True)
        if any(value is None and used for used, value in read):
            raise _rule_bug(eqn, "returned None for a result that is read")
        outs = [_unmade(builder) if value is None else value for value in outs]
        for var, value in zip(eqn.outvars, outs, strict=True):
            wrong = self._stamp(value, var.aval)
            if wrong:
                raise _rule_bug(eqn, wrong)
        value_range.propagate(eqn, outs, ranges)
        value_range.propagate_dims(eqn, inputs, outs)
        return outs

    def _on_data(self, eqn: Eqn, registration: Registration | None) -> Any | None:
        """For an op on typed keys or complex numbers, the same computation on their real data
        (uint32 words, float pairs) as a jaxpr; None for other ops, for rules that handle the
        data themselves, and for call-like and control-flow ops (their bodies are lowered on
        the data).

        Keys: any op that makes keys from keys only rearranges them. Complex numbers: see
        ``core/complex.py``; a complex op with no lowering on pairs is ``_NO_PAIRS``.
        """
        if registration is not None and (registration.key_data or registration.complex_pairs):
            return None
        if eqn.primitive.name in CALL_BODIES or jxi.subjaxprs_of(eqn.params):
            return None
        if any(jxi.is_key_dtype(aval.dtype) for aval in avals(eqn.outvars)):
            return jxi.data_jaxpr(eqn)
        if complex_pairs.touches_complex(eqn):
            jaxpr = complex_pairs.pairs_jaxpr(eqn)
            if jaxpr is None and registration is not None:
                return _NO_PAIRS  # (a library primitive without a rule: its impl, below)
            return jaxpr
        return None

    def _stamp(self, value: ir.Value, aval: Aval) -> str | None:
        """Give ``value`` the type and shape of ``aval``; what disagrees, if anything (graph
        inputs and constants passed through are typed already)."""
        dtype, shape = onnx_aval(aval)
        if value.dtype is not None and value.dtype.numpy() != dtype:
            return f"returned {value.dtype.name} where JAX has {np.dtype(dtype).name}"
        if value.type is None or value.producer() is not None:
            set_type(value, dtype, shape)
        return None

    def lower_call(self, eqn: Eqn, inputs: list[ir.Value], builder: GraphBuilder) -> list[ir.Value]:
        """A call-like equation without a rule: its body inlined (or, for a named ``jit``, a
        recognized library call's op); the coverage plugin records these nodes as no rule's."""
        keys = CALL_BODIES.get(eqn.primitive.name, ("body",))
        body = next((eqn.params[k] for k in keys if eqn.params.get(k) is not None), None)
        if body is None:
            raise AssertionError(f"no body found in the params of {eqn.primitive.name}")
        # the body's results are the call's: those the caller drops are dead in the body too
        read = [not isinstance(v, jxi.DropVar) for v in eqn.outvars]
        whole = all(read) or len(jxi.as_closed(body).jaxpr.outvars) != len(read)
        used = None if whole else read
        scope = eqn.params.get("name") if eqn.primitive.name in ("pjit", "jit") else None
        if scope and scope != "<lambda>":
            with builder.name_scope(str(scope)):
                if self.config.coarse_ops:
                    for recognize in _CALL_RECOGNIZERS:
                        outs = recognize(LoweringContext(self, eqn, builder), inputs)
                        if outs is not None:
                            return outs
                return self.lower_jaxpr(body, inputs, builder, used)
        return self.lower_jaxpr(body, inputs, builder, used)


CallRecognizer = Callable[["LoweringContext", list[ir.Value]], "list[ir.Value] | None"]
_CALL_RECOGNIZERS: list[CallRecognizer] = []


def recognize_calls(recognizer: CallRecognizer) -> CallRecognizer:
    """Register ``recognizer(ctx, inputs)`` for named ``jit`` equations (``ctx.eqn``): the
    values of a coarse op for a call it recognises (a library's jitted function reached by a
    name no patch sees), None to lower the call's body as usual."""
    _CALL_RECOGNIZERS.append(recognizer)
    return recognizer


class LoweringContext:
    """What a rule sees: the equation's avals, the builder, constants and dims.

    Beside ``ctx.op.X`` it holds the rule toolkit, one definition each of what many rules
    need: int64 constants (:meth:`ints`), casts, reshape / slice / expand / iota that handle
    symbolic and size-0 dims, reductions across opsets, and contexts for body graphs
    (:meth:`body`). Dim predicates (``same_dim``, ``has_zero``, ...) are in
    ``core/symbolic.py``.
    """

    def __init__(self, lowerer: Lowerer, eqn: Eqn, builder: GraphBuilder) -> None:
        self.lowerer = lowerer
        self.eqn = eqn
        self.builder = builder
        self.op = builder.op

    def within(self, builder: GraphBuilder) -> LoweringContext:
        """This equation's context writing into ``builder`` (a body graph): ``op``, the
        toolkit and :meth:`lower_sub` then add their nodes there."""
        return LoweringContext(self.lowerer, self.eqn, builder)

    def body(self, name: str) -> LoweringContext:
        """The context of a new body graph (an If branch, a Loop or Scan body) below this
        one; ``body.builder`` takes its inputs and outputs."""
        return self.within(self.builder.body(name))

    def graph_returning(self, values: Sequence[ir.Value], types: Sequence[OnnxType]) -> ir.Graph:
        """This body's graph with ``values`` as its outputs of ``types`` ((dtype, shape) each).

        A body output must be made by a node of the body, once: outer values, constants, body
        inputs and repeated values pass through an Identity.
        """
        graph = self.builder
        own = {id(node) for node in graph.nodes}
        seen: set[int] = set()
        for value, (dtype, shape) in zip(values, types, strict=True):
            producer = value.producer()
            if producer is None or id(producer) not in own or id(value) in seen:
                value = self.op.Identity(value)
            seen.add(id(value))
            set_type(value, dtype, shape)
            graph.outputs.append(value)
        return graph.build_graph()

    def unless_empty(
        self,
        sizes: Sequence[Any],
        types: Sequence[OnnxType],
        run: Callable[[LoweringContext], Sequence[ir.Value]],
        empty: Callable[[LoweringContext], Sequence[ir.Value]],
    ) -> list[ir.Value]:
        """``run``'s values of ``types``, or ``empty``'s where one of ``sizes`` is 0 at run time:
        for an op a runtime refuses on empty inputs (onnxruntime aborts the process on a GRU or
        LSTM of batch or length 0, and refuses an Attention of batch 0).

        ``sizes`` are tensors (their element count) and dims that may be 0 at run time; one
        ``If`` on ``Equal(size, 0)`` (``Or``-ed) holds the two as branches. No sizes: ``run``.
        """
        if not sizes:
            results = list(run(self))
            for value, (dtype, shape) in zip(results, types, strict=True):
                set_type(value, dtype, shape)  # (what the passes compare shapes on)
            return results
        tested = [self.op.Size(d) if isinstance(d, ir.Value) else self.dim_scalar(d) for d in sizes]
        is_empty = self.op.Equal(tested[0], self.ints(0))
        for size in tested[1:]:
            is_empty = self.op.Or(is_empty, self.op.Equal(size, self.ints(0)))
        graphs = {}
        for name, form in (("then_branch", empty), ("else_branch", run)):
            body = self.body(name)
            graphs[name] = body.graph_returning(form(body), types)
        results = self.builder.add_node("If", [is_empty], graphs, num_outputs=len(types))
        for value, (dtype, shape) in zip(results, types, strict=True):
            set_type(value, dtype, shape)
        return list(results)

    @property
    def used_outputs(self) -> list[bool]:
        """Which of the equation's results something reads (``jxi.live_equations``): a rule
        may skip the work of one that is not, returning None in its place."""
        return [not isinstance(v, jxi.DropVar) for v in self.eqn.outvars]

    @property
    def avals_in(self) -> list[Aval]:
        return [v.aval for v in self.eqn.invars]

    @property
    def avals_out(self) -> list[Aval]:
        return [v.aval for v in self.eqn.outvars]

    @property
    def aval_in(self) -> Aval:
        return self.eqn.invars[0].aval

    @property
    def aval_out(self) -> Aval:
        return self.eqn.outvars[0].aval

    @property
    def opset(self) -> int:
        return self.lowerer.config.opset_version

    @property
    def target(self) -> Target:
        """The deployment target's profile (core/targets/): how loops are written, ..."""
        return self.lowerer.config.profile

    def has_kernel(self, op: str, domain: str = "") -> bool:
        """Whether the opset defines ONNX op ``op`` and the target runs it with a kernel of its
        own (not as the op's function body: a rule then writes its own decomposition); for
        another ``domain``, whether the target runs that domain's ``op``."""
        if domain:
            return f"{domain}.{op}" in self.target.domain_ops
        return has_op(op, self.opset) and self.target.has_kernel(op, self.opset)

    @property
    def source_line(self) -> str:
        """The user's line for this equation: its own, or for a body JAX traced inside a library
        function (``jnp.linalg.svd`` is jitted) the caller's line the interpreter resolved."""
        return self.builder.doc_string or jxi.source_line(self.eqn, library_ok=True)

    def const(self, value: Any, *, like: Any = None, dtype: Any = None) -> ir.Value:
        """A constant; ``like`` (an ir.Value or aval) gives its dtype."""
        if dtype is None and like is not None:
            dtype = numpy_dtype(like) if isinstance(like, ir.Value) else onnx_aval(like)[0]
        return self.builder.const(np.asarray(value, dtype=dtype))

    def dim(self, d: Dim) -> ir.Value:
        """A (possibly symbolic) dim as an int64 tensor of shape [1]."""
        return self.lowerer.dims.dim(d)

    def shape_tensor(self, dims: Sequence[Dim]) -> ir.Value:
        """A shape (ints and symbolic dims) as a 1-D int64 tensor; constant when static."""
        if not any(jxi.is_symbolic_dim(d) for d in dims):
            return self.builder.const(np.array([int(d) for d in dims], dtype=np.int64))
        if len(dims) == 1:
            return self.dim(dims[0])
        return self.op.Concat(*[self.dim(d) for d in dims], axis=0)

    def full(self, aval: Aval, value: Any) -> ir.Value:
        """An aval's dtype and (possibly symbolic) shape holding ``value`` everywhere: a
        constant when small and static (an empty result is no node), else one
        ``ConstantOfShape`` (no large constant in the file)."""
        dtype, shape = onnx_aval(aval)
        fill = np.asarray(value, dtype)
        if (
            not any(jxi.is_symbolic_dim(d) for d in shape)
            and int(np.prod(shape, dtype=np.int64)) <= 16
        ):
            return self.const(np.full(shape, fill, dtype))
        return self.op.ConstantOfShape(
            self.shape_tensor(shape), value=numpy_tensor(fill.reshape(1))
        )

    def zeros(self, aval: Aval) -> ir.Value:
        """:meth:`full` of zeros."""
        return self.full(aval, 0)

    # -- the rule toolkit -----------------------------------------------------------------
    def ints(self, values: int | Sequence[int] | np.ndarray) -> ir.Value:
        """An int64 constant (axes, starts, pads, shapes): a scalar for an int, 1-D for a
        sequence."""
        return self.builder.const(np.asarray(values, dtype=np.int64))

    def index(self, d: Dim) -> Index:
        """A dim as an :data:`Index`: the int when static, else ``ctx.dim(d)``."""
        return self.dim(d) if jxi.is_symbolic_dim(d) else int(d)

    def index_vector(self, items: Sequence[Index]) -> ir.Value:
        """A 1-D int64 tensor of indices (static ints and [1]-shaped values); a constant when
        all are static."""
        static = [i for i in items if not isinstance(i, ir.Value)]
        if len(static) == len(items):
            return self.ints([int(i) for i in static])
        parts = [i if isinstance(i, ir.Value) else self.ints([i]) for i in items]
        return parts[0] if len(parts) == 1 else self.op.Concat(*parts, axis=0)

    def dim_scalar(self, d: Dim) -> ir.Value:
        """A (possibly symbolic) dim as an int64 scalar: a Range limit, a Loop trip count."""
        if not jxi.is_symbolic_dim(d):
            return self.ints(int(d))
        return self.op.Squeeze(self.dim(d), self.ints([0]))

    def cast(self, x: ir.Value, dtype: Any) -> ir.Value:
        """``x`` as ``dtype``: ``x`` itself when it has that type already, else one Cast."""
        to = ir_dtype(dtype)
        return x if x.dtype == to else self.op.Cast(x, to=to)

    def reshape(self, x: ir.Value, dims: Sequence[Dim]) -> ir.Value:
        """Reshape to ``dims`` (ints and symbolic dims); a 0 means size 0, never "copy".

        One symbolic dim becomes -1, inferred by Reshape instead of computed at run time, when
        every other dim is provably non-zero (a 0 would make -1 ambiguous). Otherwise every
        dim is given and allowzero=1, so a dim that is 0 at run time means 0.
        """
        symbolic = [i for i, d in enumerate(dims) if jxi.is_symbolic_dim(d)]
        if symbolic:
            # an expression (B*T) costs nodes to compute; a plain variable is one Shape node
            infer = next(
                (i for i in symbolic if jxi.dim_vars(dims[i]) != {dim_name(dims[i])}), symbolic[0]
            )
            if all(is_positive(d) for i, d in enumerate(dims) if i != infer):
                items = [-1 if i == infer else self.index(d) for i, d in enumerate(dims)]
                return self.op.Reshape(x, self.index_vector(items))
            return self.op.Reshape(x, self.shape_tensor(dims), allowzero=1)
        allowzero = 1 if any(int(d) == 0 for d in dims) else None
        return self.op.Reshape(x, self.shape_tensor(dims), allowzero=allowzero)

    def slice(
        self,
        x: ir.Value,
        axes: Sequence[int],
        starts: Sequence[Index],
        ends: Sequence[Index],
        steps: Sequence[int] | None = None,
    ) -> ir.Value:
        """``Slice`` along ``axes``; bounds are static ints or [1]-shaped int64 values (clamped
        by Slice: ``2**63 - 1`` is "to the end")."""
        inputs = [x, self.index_vector(starts), self.index_vector(ends), self.ints(list(axes))]
        if steps is not None and any(s != 1 for s in steps):
            inputs.append(self.ints(list(steps)))
        return self.op.Slice(*inputs)

    def expand(self, x: ir.Value, dims: Sequence[Dim]) -> ir.Value:
        """``Expand`` to ``dims``, where a 1 keeps the operand's dim (no shape arithmetic for
        the dims already in place).

        A static 0 is made by expanding to 1 and slicing to 0: onnxruntime (1.32) removes an
        Expand to a constant shape holding a 0 where the operand has a 1 (ExpandElimination,
        after an Unsqueeze), and the 1 stays.
        """
        zeros = [i for i, d in enumerate(dims) if is_zero(d)]
        y = self.op.Expand(
            x, self.shape_tensor([1 if i in zeros else d for i, d in enumerate(dims)])
        )
        return self.slice(y, zeros, [0] * len(zeros), [0] * len(zeros)) if zeros else y

    def iota(self, n: Dim, axis: int = 0, rank: int = 1, dtype: Any = np.int64) -> ir.Value:
        """0, 1, ..., n-1 along ``axis`` of a rank-``rank`` tensor (size 1 elsewhere), counted
        in int64 and converted as XLA converts an index (int8 wraps, float16 rounds). A
        constant when ``n`` is static and small, else a Range."""
        others = [i for i in range(rank) if i != axis]
        if not jxi.is_symbolic_dim(n) and int(n) <= _IOTA_CONSTANT_MAX:
            view = [int(n) if i == axis else 1 for i in range(rank)]
            return self.const(np.arange(int(n), dtype=np.int64).astype(dtype).reshape(view))
        line = self.op.Range(self.ints(0), self.dim_scalar(n), self.ints(1))
        # its length is n; ONNX's inference cannot tell that from a run-time limit and would
        # otherwise type the graph by whole-graph inference, naming the length unk__0
        line.shape = ir_shape([n])
        line = self.cast(line, dtype)
        return self.op.Unsqueeze(line, self.ints(others)) if others else line

    def reduce(
        self, op_type: str, x: ir.Value, axes: Sequence[int] | None = None, *, keepdims: int = 0
    ) -> ir.Value:
        """``op_type`` (ReduceMax, ReduceMin, ...) over ``axes`` (None: all of them; no axes:
        ``x`` itself, where ONNX would reduce all). Written in the newest form (axes as an
        input); the builder writes an older opset's (core/opset_forms.py)."""
        if axes is not None and not len(axes):
            return x
        inputs = [x] if axes is None else [x, self.ints(list(axes))]
        return getattr(self.op, op_type)(*inputs, keepdims=keepdims)

    def any(self, mask: ir.Value, axes: Sequence[int] | None = None) -> ir.Value:
        """``reduce_or`` of a bool ``mask`` over ``axes`` (None: all), false for no elements.
        In uint8: onnxruntime's bool ReduceMax fails on empty sets."""
        return self.cast(self.reduce("ReduceMax", self.cast(mask, np.uint8), axes), np.bool_)

    def all(self, mask: ir.Value, axes: Sequence[int] | None = None) -> ir.Value:
        """``reduce_and`` of a bool ``mask`` over ``axes`` (None: all), true for no elements.
        In uint8: ReduceMin takes bools only from opset 20."""
        return self.cast(self.reduce("ReduceMin", self.cast(mask, np.uint8), axes), np.bool_)

    def log1p(self, x: ir.Value) -> ir.Value:
        """``log(1 + x)`` accurate for small ``x`` (Kahan: ``log(u) * x / (u - 1)``, u = 1 + x);
        the log1p rule and the functions built on it (asinh, atanh, lgamma) share it."""
        one = self.const(1, like=x)
        u = self.op.Add(one, x)
        # x / (u - 1) ~ 1: no overflow
        r = self.op.Mul(self.op.Log(u), self.op.Div(x, self.op.Sub(u, one)))
        r = self.op.Where(self.op.Equal(u, one), x, r)
        edge = self.op.Or(self.op.IsInf(u), self.op.Equal(u, self.const(0, like=x)))
        return self.op.Where(edge, self.op.Log(u), r)

    def is_negative_zero(self, x: ir.Value) -> ir.Value:
        """Where float ``x`` is -0.0 (``1 / x`` is -inf exactly there): a sign test that
        ``Less(x, 0)`` misses (sign, copysign, nextafter, total order compares)."""
        zero = self.const(0, like=x)
        inv = self.op.Div(self.const(1, like=x), x)
        return self.op.And(self.op.Equal(x, zero), self.op.Less(inv, zero))

    def derived_weight(
        self,
        weight: ir.Value,
        key: Hashable,
        array_fn: Callable[[np.ndarray], np.ndarray],
        node_fn: Callable[[ir.Value], ir.Value],
    ) -> ir.Value:
        """A weight rearranged for an ONNX op (transposed, reshaped, gates reordered, or
        converted: ``array_fn``'s dtype is the result's).

        An initializer is rearranged into an initializer that takes over its name
        (the original, renamed ``<name>/original``, is dropped unless something else uses it),
        so the graph has no node for it and no second copy; a weight that is a graph or
        function input is rearranged by ``node_fn``'s nodes. ``key`` names the rearrangement
        (equal keys share one result). The rearranged data is computed lazily, when the
        tensor is written: the export never holds a second copy of the weight.
        """
        tensor = weight.const_value
        if (
            tensor is None
            or weight.producer() is not None
            or self.builder.isolated
            or weight.name is None
        ):
            return node_fn(weight)
        cache = weight.meta.setdefault("jax2onnx_nn.derived", {})
        if key not in cache:
            name = weight.name
            # the result's shape, from data that takes no memory (views of it stay free)
            sample = np.asarray(
                array_fn(np.broadcast_to(np.zeros((), tensor.dtype.numpy()), tensor.shape.numpy()))
            )
            lazy = ir.LazyTensor(
                lambda: ir.Tensor(np.ascontiguousarray(array_fn(tensor.numpy()))),
                dtype=ir_dtype(sample.dtype),
                shape=ir.Shape(sample.shape),
            )
            derived = self.builder.initializer(lazy, f"{name}/derived")
            if not cache:  # the first rearrangement takes the weight's name
                weight.name, derived.name = self.builder.names.fresh(f"{name}/original"), name
            cache[key] = derived
        return cache[key]

    def transposed_weight(self, weight: ir.Value, perm: Sequence[int]) -> ir.Value:
        """:meth:`derived_weight` for a transpose."""
        perm = [int(p) for p in perm]
        return self.derived_weight(
            weight,
            ("transpose", *perm),
            lambda a: np.transpose(a, perm),
            lambda v: self.transpose(v, perm),
        )

    def reshaped_weight(self, weight: ir.Value, shape: Sequence[int]) -> ir.Value:
        """:meth:`derived_weight` for a reshape to a static shape."""
        shape = [int(d) for d in shape]
        return self.derived_weight(
            weight,
            ("reshape", *shape),
            lambda a: a.reshape(shape),
            lambda v: self.op.Reshape(v, self.const(shape, dtype=np.int64)),
        )

    def transpose(self, x: ir.Value, perm: Sequence[int]) -> ir.Value:
        """``Transpose(x, perm)``; when ``x`` is itself a transpose this one undoes (the
        channels-last round trip between two coarse ops), the value before it instead."""
        perm = [int(p) for p in perm]
        producer = x.producer()
        if (
            producer is not None
            and producer.op_type == "Transpose"
            and producer.domain == ""
            and "perm" in producer.attributes
        ):
            inner = list(producer.attributes["perm"].value)
            source = producer.inputs[0]
            undone = len(inner) == len(perm) and [inner[p] for p in perm] == list(range(len(perm)))
            if undone and source is not None:
                return source
        return self.op.Transpose(x, perm=perm)

    def lower_sub(
        self,
        closed_jaxpr: ClosedJaxpr,
        inputs: Sequence[ir.Value],
        builder: GraphBuilder | None = None,
    ) -> list[ir.Value]:
        """Lower a sub-jaxpr (a body) into ``builder`` (default: the current one)."""
        return self.lowerer.lower_jaxpr(closed_jaxpr, inputs, builder or self.builder)

    def typed(self, value: ir.Value, aval: Aval) -> ir.Value:
        """Stamp an aval's dtype/shape on an intermediate value (bodies need typed I/O)."""
        dtype, shape = onnx_aval(aval)
        set_type(value, dtype, shape)
        return value


__all__ = ["Index", "Lowerer", "LoweringContext", "OnnxType", "is_float", "onnx_aval", "ir_shape"]


def _unmade(builder: GraphBuilder) -> ir.Value:
    """What stands for a result nothing reads and nothing computed (a rule's None, a dead
    output of a body lowered inline): a value no node makes, in no graph."""
    return ir.Value(name=builder.names.fresh("dropped"))


def _rule_bug(eqn: Eqn, what: str) -> ConversionError:
    """A lowering that disagrees with JAX's avals: a bug of this package (or of a user's
    registered lowering), reported as what, where and what to do, not as an assertion."""
    where = jxi.source_line(eqn) or jxi.source_line(eqn, library_ok=True) or "<unknown location>"
    return ConversionError(
        f"internal error: the lowering of {eqn.primitive.name} at {where} {what}; nothing was "
        "exported. This is a bug in jax2onnx_nn (or in a lowering passed with lowerings=): "
        "please report it with this message. Casting that operation's inputs to another dtype "
        "may avoid it meanwhile"
    )
