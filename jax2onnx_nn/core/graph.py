"""The graph builder: a thin layer over onnx_ir.

It owns what every lowering rule would otherwise re-do: unique, scope-derived names for nodes
and values, deduplicated constants, initializers that wrap (never copy) numpy buffers, and the
``op`` namespace that rules write nodes with (``b.op.Gemm(a, w, c, transB=1)``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import kernels, opset_forms
from jax2onnx_nn.core.memo import BoundedMemo

_SMALL_CONST = 256  # constants up to this many elements are deduplicated by content


@functools.lru_cache(maxsize=256)
def _ir_dtype(dtype: np.dtype) -> ir.DataType:
    return ir.DataType.from_numpy(dtype)


def ir_dtype(dtype: Any) -> ir.DataType:
    return _ir_dtype(np.dtype(dtype))


@functools.lru_cache(maxsize=4096)
def dim_name(d: Any) -> str:
    """The name of a symbolic dim (``B``, ``2*B``) in ONNX shapes. ``str`` of a JAX dim
    expression sorts its terms (~10 µs); a shape is stamped on every value made, so each
    distinct dim is named once."""
    return str(d)


def numpy_tensor(array: Any, name: str | None = None) -> ir.Tensor:
    """``ir.tensor`` of a numpy array, without its checks of what else the value could be
    (runtime protocols: ~0.1 ms a call, paid per constant a pass makes)."""
    return ir.Tensor(np.asarray(array), name=name)


def ir_shape(dims: Sequence[Any]) -> ir.Shape:
    """Static dims stay ints; symbolic dims (B, 2*B) become named dims."""
    return ir.Shape([d if isinstance(d, (int, np.integer)) else dim_name(d) for d in dims])


class _Names:
    """Unique names in O(1) per name, shared by a graph and all its sub-graphs."""

    def __init__(self) -> None:
        self._taken: set[str] = set()
        self._next: dict[str, int] = {}

    def fresh(self, base: str) -> str:
        if base not in self._taken:
            self._taken.add(base)
            return base
        n = self._next.get(base, 1)
        while f"{base}_{n}" in self._taken:
            n += 1
        self._next[base] = n + 1
        name = f"{base}_{n}"
        self._taken.add(name)
        return name

    def reserve(self, name: str) -> None:
        self._taken.add(name)


class _Constants:
    """Deduplicated constants of one model; stored as initializers of the main graph."""

    def __init__(self) -> None:
        self.by_key: dict[Any, ir.Value] = {}
        self.initializers: list[ir.Value] = []


class OpNamespace:
    """``ops.Add(a, b)``, ``ops.Split(x, s, axis=0, _outputs=2)``, ``ops.F(x, _domain="d")``."""

    def __init__(self, builder: GraphBuilder) -> None:
        self._builder = builder

    def __getattr__(self, op_type: str) -> Any:
        def make(
            *inputs: Any,
            _outputs: int = 1,
            _domain: str = "",
            _name: str | None = None,
            **attrs: Any,
        ) -> Any:
            outs = self._builder.add_node(
                op_type, inputs, attrs, num_outputs=_outputs, domain=_domain, name=_name
            )
            return outs[0] if _outputs == 1 else outs

        return make


class GraphBuilder:
    """Nodes, inputs, outputs and constants of one ONNX graph (main graph or a body)."""

    def __init__(
        self,
        name: str = "main",
        *,
        parent: GraphBuilder | None = None,
        isolated: bool = False,
    ) -> None:
        self.name = name
        self.parent = parent
        # A function body sees no outer scope: its constants are Constant nodes of its own.
        self.isolated: bool = isolated or (parent is not None and parent.isolated)
        self.nodes: list[ir.Node] = []
        self.inputs: list[ir.Value] = []
        self.outputs: list[ir.Value] = []
        self.names: _Names = parent.names if parent else _Names()
        self.constants: _Constants = (
            _Constants() if (parent is None or self.isolated) else parent.constants
        )
        self.scope: list[str] = list(parent.scope) if parent else []
        # the source line of the equation being lowered; a body graph starts with its owner's
        self.doc_string: str | None = parent.doc_string if parent else None
        self.op = OpNamespace(self)
        self.opset_imports: dict[str, int] = parent.opset_imports if parent else {}

    # -- naming ---------------------------------------------------------------------------
    @contextmanager
    def name_scope(self, name: str) -> Iterator[None]:
        self.scope.append(name)
        try:
            yield
        finally:
            self.scope.pop()

    def _scoped(self, base: str) -> str:
        return "/".join([*self.scope, base]) if self.scope else base

    # -- values ---------------------------------------------------------------------------
    def add_input(self, name: str, dtype: Any, shape: Sequence[Any] | None) -> ir.Value:
        """A new graph input (``shape`` None: unknown rank, as a Loop's carried value may be)."""
        value = ir.Value(
            name=self.names.fresh(name),
            type=ir.TensorType(ir_dtype(dtype)),
            shape=None if shape is None else ir_shape(shape),
        )
        self.inputs.append(value)
        return value

    def initializer(self, array: Any, name: str) -> ir.Value:
        """A named weight; wraps the array's buffer without copying it (or takes a tensor,
        such as a lazily computed one, as it is)."""
        tensor = (
            array if isinstance(array, ir.LazyTensor) else ir.Tensor(np.asarray(array), name=None)
        )
        value = ir.Value(
            name=self.names.fresh(name),
            type=ir.TensorType(tensor.dtype),
            shape=ir.Shape(tensor.shape),
            const_value=tensor,
        )
        if self.isolated:
            return self._constant_node(value)
        self.constants.initializers.append(value)
        return value

    def const(self, value: Any, dtype: Any = None) -> ir.Value:
        """A constant tensor; equal small constants are one value."""
        array = np.asarray(value, dtype=dtype)
        if array.size <= _SMALL_CONST:
            key: Any = (array.dtype, array.shape, array.tobytes())
        else:
            key = ("id", id(value), array.dtype, array.shape)
        cached = self.constants.by_key.get(key)
        if cached is not None:
            return cached
        tensor = ir.Tensor(array)
        name = self.names.fresh(_const_name(array))
        result = ir.Value(
            name=name,
            type=ir.TensorType(tensor.dtype),
            shape=ir.Shape(array.shape),
            const_value=tensor,
        )
        if self.isolated:
            result = self._constant_node(result)
        else:
            self.constants.initializers.append(result)
        if array.size > _SMALL_CONST:
            self._keepalive = getattr(self, "_keepalive", []) + [value]  # id() stays unique
        self.constants.by_key[key] = result
        return result

    def _constant_node(self, value: ir.Value) -> ir.Value:
        tensor = value.const_value
        assert tensor is not None  # called for constants only
        node = ir.Node(
            "",
            "Constant",
            [],
            [ir.AttrTensor("value", tensor)],
            name=self.names.fresh(f"{value.name}/Constant"),
        )
        out = node.outputs[0]
        out.name = value.name
        out.type, out.shape = value.type, value.shape
        out.const_value = value.const_value
        self.nodes.append(node)
        return out

    # -- nodes ----------------------------------------------------------------------------
    def add_node(
        self,
        op_type: str,
        inputs: Sequence[Any],
        attrs: dict[str, Any],
        *,
        num_outputs: int = 1,
        domain: str = "",
        name: str | None = None,
    ) -> list[ir.Value]:
        values = [self._as_value(x) for x in inputs]
        if domain == "":
            older = self.older_form_of(op_type, values, attrs, num_outputs)
            if older is not None:
                return older
        original = widened = None
        kernel = kernels.kernel_key(op_type, attrs)
        if domain == "" and kernel in kernels.table():
            original, widened = self._kernel_dtype(kernel, values)
            if widened is not None:
                t_inputs = kernels.T_INPUTS.get(kernel, range(len(values)))
                values = [
                    self._cast(v, widened) if i in t_inputs and v is not None else v
                    for i, v in enumerate(values)
                ]
        attributes = [_attribute(k, _attr(v)) for k, v in attrs.items() if v is not None]
        node_name = self.names.fresh(self._scoped(name or op_type))
        node = ir.Node(
            domain,
            op_type,
            values,
            attributes,
            num_outputs=num_outputs,
            name=node_name,
            doc_string=self.doc_string,
        )
        for i, out in enumerate(node.outputs):
            out.name = self.names.fresh(f"{node_name}_output_{i}")
        self.nodes.append(node)
        if domain == "":
            _infer_dtypes(node, values, attrs)
        outputs = list(node.outputs)
        if widened is not None and kernel not in kernels.FIXED_OUTPUT:
            outputs[0] = self._cast(outputs[0], original)
        return outputs

    @property
    def opset(self) -> int | None:
        """The export's opset (None for a builder outside an export: newest forms)."""
        return self.opset_imports.get("")

    def older_form_of(
        self, op_type: str, values: list[Any], attrs: dict[str, Any], num_outputs: int
    ) -> list[ir.Value] | None:
        """``op_type`` written in the form the export's opset has (core/opset_forms.py), or
        None when the form given is valid at that opset."""
        opset = self.opset
        write = None if opset is None else opset_forms.older_form(op_type, opset, values, attrs)
        return None if write is None else write(self, op_type, values, dict(attrs), num_outputs)

    def _kernel_dtype(self, op_type: str, values: list[ir.Value | None]) -> tuple[Any, Any]:
        """(input dtype, dtype to compute in) when onnxruntime lacks a kernel, else (dtype,
        None)."""
        t_inputs = kernels.T_INPUTS.get(op_type, range(len(values)))
        dtype = next(
            (
                v.dtype.numpy()
                for i, v in enumerate(values)
                if i in t_inputs and v is not None and v.dtype is not None
            ),
            None,
        )
        if dtype is None or kernels.supports(op_type, dtype):
            return dtype, None
        wider = kernels.compute_dtype(op_type, dtype)
        if wider is None:
            raise NotImplementedError(
                f"onnxruntime has no {op_type} kernel for {dtype} and no wider type keeps its "
                "values"
            )
        return dtype, wider

    def _cast(self, value: ir.Value, dtype: Any) -> ir.Value:
        node_name = self.names.fresh(self._scoped("Cast"))
        node = ir.Node(
            "",
            "Cast",
            [value],
            [ir.AttrInt64("to", ir_dtype(dtype))],
            name=node_name,
            doc_string=self.doc_string,
        )
        out = node.outputs[0]
        out.name = self.names.fresh(f"{node_name}_output_0")
        out.type = ir.TensorType(ir_dtype(dtype))
        out.shape = value.shape
        self.nodes.append(node)
        return out

    def _as_value(self, x: Any) -> ir.Value | None:
        if x is None or isinstance(x, ir.Value):
            return x
        if isinstance(x, (np.ndarray, np.generic)):
            return self.const(x)
        raise TypeError(
            f"node inputs must be ir.Value, numpy arrays or None, got {type(x).__name__}"
        )

    def child(self, name: str, *, isolated: bool = False) -> GraphBuilder:
        """A builder for a body graph (If/Loop/Scan) or, isolated, an ONNX function body."""
        return GraphBuilder(name, parent=self, isolated=isolated)

    def body(self, name: str) -> GraphBuilder:
        """The builder of a new body graph (an If branch, a Loop or Scan body) below this one,
        named uniquely after ``name``; its constants live where this builder's do."""
        return self.child(self.names.fresh(name))

    def build_graph(self) -> ir.Graph:
        """The ir.Graph of this builder (bodies carry no initializers: constants live outside)."""
        initializers = self.constants.initializers if self.parent is None else ()
        return ir.Graph(
            self.inputs,
            self.outputs,
            nodes=self.nodes,
            initializers=initializers,
            name=self.name,
            opset_imports=self.opset_imports if self.parent is None else None,
        )


@functools.lru_cache(maxsize=256)
def dtype_name(dtype: np.dtype) -> str:
    """``dtype.name`` (``float32``), which NumPy computes in Python (~9 us) on every access:
    paid per constant a rule or a pass makes."""
    return dtype.name


def _const_name(array: np.ndarray) -> str:
    if (
        array.size == 1
    ):  # named after its value: asked again by every export (str of a float: ~2 us)
        return _SCALAR_NAMES.get_or_make(
            (array.dtype, array.ndim, array.tobytes()), lambda: _scalar_name(array)
        )
    return f"const_{dtype_name(array.dtype)}"


def _scalar_name(array: np.ndarray) -> str:
    v = array.reshape(()).item()
    text = str(v).replace("-", "m").replace(".", "p").replace("+", "")
    if len(text) <= 12 and text.replace("_", "").isalnum():
        return f"const_{dtype_name(array.dtype)}_{text}" + (
            "" if array.ndim == 0 else f"_r{array.ndim}"
        )
    return f"const_{dtype_name(array.dtype)}"


_SCALAR_NAMES: BoundedMemo[str] = BoundedMemo(4096)


def _attr(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ir.Tensor(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (tuple, list)):
        return [_attr(v) for v in value]
    return value


REQUIRED = "jax2onnx_nn.required"  # node meta key: the clean-up passes keep this node as it is


def mark_required(value: ir.Value) -> ir.Value:
    """Keep the node making ``value`` through the clean-up passes (no pass bypasses, merges
    through or rewrites it) and return ``value``. For a node whose declared result type
    says nothing new but whose run-time effect is needed: the Reshape after a Loop's stacked
    outputs, which onnxruntime gives as (0, 0, ...) after no trip."""
    producer = value.producer()
    if producer is not None:
        producer.meta[REQUIRED] = True
    return value


def is_required(node: ir.Node | None) -> bool:
    """True for a node :func:`mark_required` marked."""
    return node is not None and bool(node.meta.get(REQUIRED))


_LIST_ATTRS: tuple[tuple[type, Any], ...] = (
    (int, ir.AttrInt64s),
    (float, ir.AttrFloat32s),
    (str, ir.AttrStrings),
)


def _attribute(name: str, value: Any) -> ir.Attr:
    """``value`` as an ONNX attribute, as ``ir.convenience.convert_attribute`` types it,
    with the common types first: onnx_ir checks a list against three runtime protocols
    (a millisecond a list) before it looks at its items."""
    if isinstance(value, int):
        return ir.AttrInt64(name, value)
    if isinstance(value, float):
        return ir.AttrFloat32(name, value)
    if isinstance(value, str):
        return ir.AttrString(name, value)
    if isinstance(value, list) and value:
        for item_type, make in _LIST_ATTRS:
            if all(isinstance(v, item_type) for v in value):
                return make(name, value)
    if isinstance(value, ir.Tensor):
        return ir.AttrTensor(name, value)
    if isinstance(value, ir.Graph):
        return ir.AttrGraph(name, value)
    return ir.convenience.convert_attribute(name, value)


def set_type(value: ir.Value, dtype: Any, shape: Sequence[Any] | None) -> None:
    """Stamp dtype and shape on a value (the interpreter calls this once per eqn output; the
    tensor type the builder gave a node's output is kept when it says the same)."""
    element = ir_dtype(dtype)
    if not (type(value.type) is ir.TensorType and value.type.dtype == element):
        value.type = ir.TensorType(element)
    value.shape = ir_shape(shape) if shape is not None else None


_BOOL_OUT = frozenset(
    [
        "Equal",
        "Less",
        "LessOrEqual",
        "Greater",
        "GreaterOrEqual",
        "IsNaN",
        "IsInf",
        "Not",
        "And",
        "Or",
        "Xor",
    ]
)
_INT64_OUT = frozenset(["ArgMax", "ArgMin", "Shape", "Size", "NonZero"])
_INT32_OUT = frozenset(["MatMulInteger", "ConvInteger"])
# the input whose element type the output takes: a (de)quantization's is its scale's or zero
# point's, not its data's
_DTYPE_FROM_INPUT = {"Where": 1, "CastLike": 1, "DequantizeLinear": 1, "QuantizeLinear": 2}
_NO_INFERENCE = frozenset(["If", "Loop", "Scan"])


def _infer_dtypes(node: ir.Node, inputs: list[ir.Value | None], attrs: dict[str, Any]) -> None:
    """Element types of a new node's outputs; shapes are filled in by one pass at the end."""
    op = node.op_type
    if op in _NO_INFERENCE:
        return
    if op in _BOOL_OUT:
        dtype: Any = ir.DataType.BOOL
    elif op in _INT64_OUT:
        dtype = ir.DataType.INT64
    elif op in _INT32_OUT:
        dtype = ir.DataType.INT32
    elif op in ("Cast", "BitCast"):
        dtype = ir.DataType(int(attrs["to"]))
    elif op == "ConstantOfShape":
        value = attrs.get("value")
        dtype = (
            ir.DataType.from_numpy(np.asarray(value).dtype)
            if value is not None
            else ir.DataType.FLOAT
        )
    else:
        i = _DTYPE_FROM_INPUT.get(op, 0)
        source = inputs[i] if i < len(inputs) else None
        dtype = source.dtype if source is not None else None
    if dtype is None:
        return
    outputs = node.outputs
    if op == "TopK":
        outputs[0].type = ir.TensorType(dtype)
        outputs[1].type = ir.TensorType(ir.DataType.INT64)
        return
    for out in outputs:
        out.type = ir.TensorType(dtype)


def tensor_bytes(tensor: ir.TensorProtocol) -> memoryview | bytes:
    """The little-endian bytes of a tensor, a view of its buffer when it has one (a lazily
    computed tensor is computed now, once): what gets written, hashed or compared without a
    copy of the weight."""
    if isinstance(tensor, ir.LazyTensor):
        tensor = tensor._evaluate()
    if (
        isinstance(tensor, ir.Tensor)
        and tensor.dtype.bitwidth % 8 == 0
        and tensor.dtype != ir.DataType.STRING
    ):
        array = np.asarray(tensor.numpy())
        if array.dtype.byteorder == ">":
            array = array.byteswap().view(array.dtype.newbyteorder("<"))
        return np.ascontiguousarray(array).reshape(-1).view(np.uint8).data
    return tensor.tobytes()
