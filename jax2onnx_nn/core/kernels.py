"""Which element types onnxruntime's CPU kernels take, and how the builder bridges the gaps.

The ONNX spec allows, for example, ``Max`` on int16 and ``Where`` on bool, but onnxruntime has
no kernel for them, so a model that uses them fails to load. Rather than have every rule check,
the builder consults this table for each node it makes: an input of a type without a kernel is
cast to the nearest wider type that has one (value-preserving), and outputs of that type are
cast back. Ops not listed take every type. The table was measured on onnxruntime 1.32 (CPU).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

_ABBREV = {
    "b": "bool",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "f16": "float16",
    "bf16": "bfloat16",
    "f32": "float32",
    "f64": "float64",
}

_FLOAT = "f16 f32 f64"
_NUMERIC = "i8 i16 i32 i64 u8 u16 u32 u64 f16 f32 f64"
_BITWISE = "i8 i16 i32 i64 u8 u16 u32 u64"

_SUPPORTED_TEXT: dict[str, str] = {
    **{
        op: _FLOAT
        for op in (
            "Exp",
            "Log",
            "Tanh",
            "Sqrt",
            "Sin",
            "Cos",
            "Floor",
            "Ceil",
            "Sigmoid",
            "Reciprocal",
            "Round",
            "Softmax",
            "LogSoftmax",
            "Softplus",
            "Elu",
            "Selu",
            "Celu",
            "HardSigmoid",
            "Mish",
            "Gelu",
            "LeakyRelu",
            "ThresholdedRelu",
            "Softsign",
            "HardSwish",
        )
    },
    **{
        op: "f16 f32"
        for op in ("Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Erf")
    },
    **{
        op: _NUMERIC
        for op in (
            "Add",
            "Sub",
            "Mul",
            "Div",
            "Mod",
            "Less",
            "LessOrEqual",
            "Greater",
            "GreaterOrEqual",
        )
    },
    **{op: _BITWISE for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot")},
    **{op: "b" for op in ("Not", "And", "Or", "Xor")},
    "Abs": _NUMERIC,
    "Neg": "i8 i16 i32 i64 f16 f32 f64",
    "Sign": "i8 i16 i32 i64 u8 u16 u32 u64 f16 bf16 f32 f64",
    "IsNaN": "f16 bf16 f32 f64",
    "IsInf": "f16 bf16 f32 f64",
    "Relu": "i8 i32 f16 f32 f64",
    "Pow": "i32 i64 f16 f32 f64",
    "Max": "i8 i32 i64 u8 u32 u64 f16 f32 f64",
    "Min": "i8 i32 i64 u8 u32 u64 f16 f32 f64",
    "Equal": "b " + _NUMERIC,
    "BitShift": "u8 u16 u32 u64",
    "Where": "i8 i32 i64 u8 u32 f16 f32 f64",
    "ReduceSum": "i32 i64 f16 f32 f64",
    "ReduceMax": "b i8 i32 i64 u8 f16 f32 f64",
    "ReduceMin": "b i8 i32 i64 u8 f16 f32 f64",
    "ReduceProd": "i32 i64 f16 f32 f64",
    "ArgMax": "i8 i32 i64 u8 f16 f32 f64",
    "ArgMin": "i8 i32 i64 u8 f16 f32 f64",
    "CumSum": "i32 i64 f16 f32 f64",
    "CumProd": "i32 i64 u32 u64 f32 f64",
    "TopK": "i8 i16 i32 i64 u8 f16 f32 f64",
    "Expand": "b " + _NUMERIC,
    "Pad": "b i8 i32 i64 u8 u32 u64 f16 bf16 f32 f64",
    "MatMul": "i32 i64 u32 u64 f16 f32 f64",
    "Gemm": "f32 f64",
    "Einsum": "i32 i64 f16 f32 f64",
    "Tile": "b " + _NUMERIC,
    "ReverseSequence": "b " + _NUMERIC,
    "Conv": "f16 f32",
    "ConvTranspose": "f16 f32",
    "MaxPool": "i8 u8 f16 f32 f64",
    "AveragePool": "f16 f32",
    "ReduceL2": "f32 f64",
    **{
        op: "f16 f32"
        for op in ("PRelu", "GRU", "LSTM", "RotaryEmbedding", "GlobalAveragePool", "GlobalMaxPool")
    },
    # (a bfloat16 Clip fails to load: "Could not find an implementation for Less(13)")
    "Clip": "i8 i16 i32 i64 u8 u16 u32 u64 f16 f32 f64",
    "Compress": "b " + _NUMERIC,
    "Sum": "f16 f32 f64",
    # scatters with a reduction: keyed by kernel_key (the reduction changes the kernels)
    **{
        f"{op}[{r}]": "b i8 i16 i32 i64 u8 u16 u32 u64 f32 f64"
        for op in ("ScatterND", "ScatterElements")
        for r in ("add", "mul")
    },
    **{f"ScatterND[{r}]": "i8 i16 i32 i64 u8 u16 u32 u64 f32 f64" for r in ("min", "max")},
    **{
        f"ScatterElements[{r}]": "i8 i16 i32 i64 u8 u16 u32 u64 f16 f32 f64" for r in ("min", "max")
    },
}


def _bfloat16() -> np.dtype:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def _parse(texts: Mapping[str, str]) -> dict[str, frozenset[np.dtype]]:
    def dt(a: str) -> np.dtype:
        return _bfloat16() if a == "bf16" else np.dtype(_ABBREV[a])

    return {op: frozenset(dt(a) for a in text.split()) for op, text in texts.items()}


# float16: onnxruntime CPU has float16 kernels only for the ops below (and the data-movement
# ops the table does not list). Every other op it loads with float16 it computes in float32
# through Casts it inserts at load time, and it drops the Cast pairs between two such ops --
# also a float32 -> float16 Cast of ours before one -- so `x * y + z` or `floor(x / y)` is
# rounded to float16 once, at the end. XLA rounds after every op: here all those ops compute in
# float32 with our Cast back after each, and onnxruntime inserts (and drops) no Cast of its own.
# Measured on onnxruntime 1.32 from the optimized model it saves (inserted Casts or none);
# tests/core/test_elementwise.py checks float16 chains bit-exactly against JAX.
_F16_KERNELS = frozenset(
    {
        "IsInf",
        "IsNaN",
        "Max",
        "Min",
        "Mod",
        "Round",
        "Sign",
        "Clip",
        "Expand",
        "Compress",
        "ReverseSequence",
        *(op for op in _SUPPORTED_TEXT if op.startswith("Scatter")),
    }
)
_F16 = np.dtype(np.float16)
SUPPORTED: dict[str, frozenset[np.dtype]] = {
    op: types if op in _F16_KERNELS else types - {_F16}
    for op, types in _parse(_SUPPORTED_TEXT).items()
}
# The table of the export that is running: onnxruntime CPU's with a target's differences
# (core/targets/; onnxruntime-web's WASM build, for example, has fewer Where kernels).
_active: ContextVar[Mapping[str, frozenset[np.dtype]]] = ContextVar("kernels", default=SUPPORTED)


def table() -> Mapping[str, frozenset[np.dtype]]:
    """``{op: element types it has kernels for}`` of the running export's target."""
    return _active.get()


@contextmanager
def target_kernels(
    differences: Mapping[str, str], without: Mapping[str, frozenset[np.dtype]] | None = None
) -> Iterator[None]:
    """Use onnxruntime CPU's table with ``differences`` (``{op: "i32 f32 ..."}``) replaced and
    the types in ``without`` (what an older opset's schemas lack) taken out."""
    active = {**SUPPORTED, **_parse(differences)} if differences else SUPPORTED
    if without:
        active = {
            **active,
            **{op: active[op] - types for op, types in without.items() if op in active},
        }
    token = _active.set(active)
    try:
        yield
    finally:
        _active.reset(token)


# Which inputs carry the op's main element type T (default: all) and which outputs have type T
# (default: output 0). Outputs of a fixed type (bool, int64) are not cast back.
T_INPUTS: dict[str, tuple[int, ...]] = {
    "Where": (1, 2),
    "Pad": (0, 2),
    "Expand": (0,),
    "Tile": (0,),
    "CumSum": (0,),
    "CumProd": (0,),
    "TopK": (0,),
    "ReduceSum": (0,),
    "ReduceMax": (0,),
    "ReduceMin": (0,),
    "ReduceProd": (0,),
    "ReduceL2": (0,),
    "ArgMax": (0,),
    "ArgMin": (0,),
    "Pow": (0, 1),
    "ReverseSequence": (0,),
    "MaxPool": (0,),
    "Compress": (0,),
    "GRU": (0, 1, 2, 3, 5),
    "LSTM": (0, 1, 2, 3, 5, 6, 7),
    "RotaryEmbedding": (0, 1, 2),
    **{
        f"{op}[{r}]": (0, 2)
        for op in ("ScatterND", "ScatterElements")
        for r in ("add", "mul", "min", "max")
    },
}
FIXED_OUTPUT = frozenset(
    [
        "Equal",
        "Less",
        "LessOrEqual",
        "Greater",
        "GreaterOrEqual",
        "IsNaN",
        "IsInf",
        "ArgMax",
        "ArgMin",
    ]
)

# Widening that keeps every value: the first type in the chain with a kernel is used.
_WIDER: dict[str, tuple[str, ...]] = {
    "bool": ("uint8", "int32", "int64"),
    "int8": ("int32", "int64"),
    "int16": ("int32", "int64"),
    "uint8": ("int32", "uint32", "int64"),
    "uint16": ("int32", "uint32", "int64"),
    "uint32": ("int64",),
    "uint64": ("int64",),  # keeps bits (modular arithmetic); order above 2**63 is not kept
    "float16": ("float32",),
    "bfloat16": ("float32",),
}


def kernel_key(op_type: str, attrs: Mapping[str, Any]) -> str:
    """The table key of a node: scatters with a reduction have their own kernels
    ("ScatterND[min]")."""
    reduction = attrs.get("reduction")
    return f"{op_type}[{reduction}]" if reduction not in (None, "none") else op_type


def supports(op_type: str, dtype: np.dtype) -> bool:
    allowed = table().get(op_type)
    return allowed is None or np.dtype(dtype) in allowed


def compute_dtype(op_type: str, dtype: np.dtype) -> np.dtype | None:
    """The type to compute ``op_type`` in for inputs of ``dtype``; None if no kernel fits."""
    dtype = np.dtype(dtype)
    if supports(op_type, dtype):
        return dtype
    for wider in _WIDER.get(dtype.name, ()):
        if supports(op_type, np.dtype(wider)):
            return np.dtype(wider)
    return None
