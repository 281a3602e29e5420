"""Deployment targets: how the graph is written so that a runtime runs it and computes JAX's numbers.

A :class:`Target` is data: the opsets the runtime loads, whether it runs model-local functions,
how a static-length loop is written, the element types its kernels lack (the builder widens,
as it does for onnxruntime CPU in core/kernels.py), the graph rewrites that make its ops compute
what JAX computes, and the ops it cannot run at all. ``to_onnx(..., target=...)`` looks the
profile up in :data:`TARGETS`; the rewrites live in core/target_rewrites.py.

What each profile says was measured with the runtimes themselves (onnxruntime 1.32,
onnxruntime-web 1.30 WASM under Node.js 20, OpenVINO 2026.4 CPU, tract 0.23) or, for TensorRT
(no GPU here), read from onnx-tensorrt's operator support list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class Target:
    """How to write a graph for one runtime.

    Attributes:
        name: the runtime (``"onnxruntime"``, ``"openvino"``, ...).
        max_opset: the newest opset it loads (None: whatever the exporter supports).
        model_functions: it runs model-local ONNX functions; if not, calls are inlined.
        scan_symbolic: a ``lax.scan`` of symbolic length is an ONNX ``Scan`` (else a ``Loop``:
            onnxruntime's Scan fails on an empty sequence, and a symbolic length may be 0).
        scan_ticks: a loop of static length without scanned inputs (a ``fori_loop``, a
            ``while_loop`` of counted steps, a ``lax.scan`` without xs) is a ``Scan`` over its
            counter's values, or over ticks its body does not read (else a ``Loop``). On
            onnxruntime 1.32 Scan is faster than Loop (benchmarks/scan_vs_loop.py); tract has
            no Loop; OpenVINO ran a Scan over ticks too few times. A static-length scan with
            scanned inputs is always a ``Scan``, a data-dependent ``while_loop`` a ``Loop`` (a
            ``Scan`` of ``loop_bound`` steps with that option).
        bounded_if: a data-dependent ``while_loop`` bounded by ``loop_bound=`` runs its body
            under an ``If`` on the condition (skipped once it is false); else every step, its
            results selected by ``Where``. On onnxruntime 1.32 the If is faster: heat_equation's
            40 steps in 0.63 vs 0.65 ms at a bound of 40, 0.81 vs 1.51 ms at 80
            (benchmarks/bounded_while.py). tract 0.23 cannot evaluate a Slice of a symbolic size
            in an ``If`` in a Scan body ("Undetermined symbol").
        kernels: ``{op: element types}`` where its kernels differ from onnxruntime CPU's
            (core/kernels.py); inputs of a type not listed are widened.
        rewrites: names of the graph rewrites (core/target_rewrites.py) that make its ops
            compute JAX's numbers, e.g. NaN-propagating ``Max``. A clean-up (constant folding,
            loop-invariant nodes hoisted out of Loop/Scan bodies) follows them.
        late_rewrites: rewrites of the graph's structure that run after that clean-up, on the
            graph as it is written, because it would undo them: hoisting a body's invariant
            nodes (some written by ``rewrites``) makes the body read the enclosing graph again.
        ops: the ONNX ops it runs (None: every op this exporter emits); an export that needs
            another one fails before writing, naming the op and the source line.
        lacks: ``{op: what to do instead}`` for ops it does not run (the export fails before
            writing, naming the op, the source line and the advice).
        float64: it computes float64 in float64. OpenVINO's CPU plugin computes it in float32
            (float64 models then match JAX to float32 precision only); nothing in the graph
            can change that.
    """

    name: str
    max_opset: int | None = None
    model_functions: bool = True
    scan_symbolic: bool = False
    scan_ticks: bool = True
    bounded_if: bool = True
    kernels: Mapping[str, str] = field(default_factory=dict)
    rewrites: tuple[str, ...] = ()
    late_rewrites: tuple[str, ...] = ()
    ops: frozenset[str] | None = None
    lacks: Mapping[str, str] = field(default_factory=dict)
    float64: bool = True

    def runs(self, op: str) -> bool:
        """Whether this runtime runs ONNX op ``op`` (of the default domain)."""
        return (self.ops is None or op in self.ops) and op not in self.lacks


# The ops onnx-tensorrt's TensorRT 10.0 importer supports (its docs/operators.md, opsets 9..20;
# re-read at the 10.1-GA release, commit 96e7811 of June 2024: the same list and opsets).
# It has no BitShift, Bitwise*, DFT, STFT or BitCast, so jax.random bit kernels cannot be exported
# for it, nor an FFT along an axis longer than 4096 (shorter ones are MatMuls: core/lowerings/fft.py);
# everything else this exporter emits is there.
_TENSORRT_OPS = frozenset("""
Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh AveragePool BatchNormalization Cast
CastLike Ceil Celu Clip Concat Constant ConstantOfShape Conv ConvTranspose Cos Cosh CumSum
DeformConv DepthToSpace DequantizeLinear Div Dropout Einsum Elu Equal Erf Exp Expand EyeLike
Flatten Floor Gather GatherElements GatherND Gelu Gemm GlobalAveragePool GlobalLpPool
GlobalMaxPool Greater GreaterOrEqual GridSample GroupNormalization GRU HardSigmoid HardSwish
Hardmax Identity If ImageScaler InstanceNormalization IsInf IsNaN LayerNormalization LeakyRelu
Less LessOrEqual Log LogSoftmax Loop LRN LSTM LpNormalization LpPool MatMul Max MaxPool Mean
MeanVarianceNormalization Min Mish Mod Mul Neg NonMaxSuppression NonZero Not OneHot Or Pad
ParametricSoftplus Pow PRelu QuantizeLinear RandomNormal RandomNormalLike RandomUniform
RandomUniformLike Range Reciprocal ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax
ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu Reshape Resize ReverseSequence
RNN RoiAlign Round ScaledTanh Scan Scatter ScatterElements ScatterND Selu Shape Shrink Sigmoid
Sign Sin Sinh Size Slice Softmax Softplus Softsign SpaceToDepth Split Sqrt Squeeze Sub Sum Tan
Tanh ThresholdedRelu Tile TopK Transpose Trilu Unsqueeze Upsample Where Xor
""".split())

_TENSORRT_NO_BITS = ("TensorRT 10 has no integer bit operations (jax.random's threefry kernels use them): "
                     "draw the random numbers outside the model and pass them as inputs")

# CumSum's types on a runtime that sums uint32 (the bitwise ops below opset 18 sum their bits
# with it; onnxruntime has no uint32 CumSum, so the builder widens to int64 for it)
_CUMSUM_UINT32 = "i32 i64 u32 u64 f32 f64"

# OpenVINO 2026.4's CPU plugin saturates int8 and uint8 Add, Sub, Mul, Neg and Abs where they
# overflow (int8 100 * 100: 127, JAX wraps to 16; -(-128): 127) and rounds their Div through
# float (7 // 2: 4); int16 and uint16 wrap, and its Cast from a wider int wraps (all measured
# on every pair of 8-bit values): those ops compute in int32, and the Cast back wraps
_OPENVINO_NO_BYTES = "i16 i32 i64 u16 u32 u64 f16 f32 f64"
_OPENVINO_WRAPPING = {**dict.fromkeys(("Add", "Sub", "Mul", "Div"), _OPENVINO_NO_BYTES),
                      "Neg": "i16 i32 i64 f16 f32 f64", "Abs": "u8 " + _OPENVINO_NO_BYTES}

# ReduceMax/Min's types on OpenVINO and tract: uint32 kept (rewritten on 16-bit halves), not widened to int64
_REDUCE_EXTREMES_UINT32 = "b i8 i32 i64 u8 u32 f16 f32 f64"

TARGETS: Mapping[str, Target] = MappingProxyType({
    "onnxruntime": Target("onnxruntime"),
    "onnxruntime-web": Target(
        "onnxruntime-web", max_opset=26,  # 1.30 refuses 27 (and IR version 14, opset 28's)
        # its WASM build registers fewer type instances than onnxruntime CPU
        kernels={"Where": "i32 i64 u8 f16 f32 f64", "BitShift": "u8 u32 u64"},
    ),
    "openvino": Target(
        "openvino", max_opset=25,  # 2026.4 has no BitCast (opset 26)
        model_functions=False, scan_symbolic=True, scan_ticks=False,
        # its CPU plugin computes uint32 arithmetic (and int32 comparisons, Mod, shifts) through
        # float32 and keeps int64 in 32 bits; int32 Add/Mul/CumSum/bitwise ops wrap as they
        # should, so uint32 is computed as int32 (CumSum too: not widened to int64; shifts by
        # run-time amounts with factors from tables: its own BitShift of a scalar is rank 1), and
        # so is a float -> uint32 Cast; its Max/Min return the other operand for NaN, its Greater
        # (OrEqual) is true for NaN, its float ReduceMax of only -inf is the lowest finite float
        # (ReduceMin of +inf the largest) and its int32 ReduceMax/Min, ReduceSum and MatMul go
        # through float32 (its CumSum and Mul wrap: sums are running sums); it refuses a float64 DFT and ignores DFT's axis input, and a
        # Scan inside another Scan's body (those become Loops; one of 0 trips there stacks what
        # the previous inference stacked: they run one trip at least, its results dropped)
        kernels={"CumSum": _CUMSUM_UINT32, **_OPENVINO_WRAPPING, **dict.fromkeys(("ReduceMax", "ReduceMin"), _REDUCE_EXTREMES_UINT32)},
        rewrites=("nested_scans_as_loops", "scan_of_no_steps_runs_one", "integer_sum_as_cumsum", "integer_matmul_as_cumsum", "uint32_bits", "uint32_as_int32", "float_to_uint32_via_int32", "nan_propagating_max_min",
                  "reduce_extremes_of_infinities", "int32_extremes_on_halves", "greater_as_less", "dft_in_float32", "dft_on_axis_one", "real_dft_reshaped"),
        # its ONNX frontend gives a Scan body's reads of the enclosing graph body parameters that
        # the Scan has no inputs for (a Scan of jax.random.gamma: "num_scan_outputs can't be
        # negative: body outputs (4) is less than num_initial_values (16)"), runs a body
        # that reads no scanned input once, and gives an empty constant shape () as a model output
        late_rewrites=("scan_captures_as_states", "scan_inputs_read", "expand_after_arithmetic", "empty_constants_as_constant_of_shape"),
        float64=False,  # its CPU plugin has no float64 kernels: measured, x * x is float32's
    ),
    "tract": Target(
        "tract", max_opset=25,  # 0.23 has no BitCast (opset 26)
        model_functions=False, scan_symbolic=True, bounded_if=False,
        # it runs CumSum on uint32 (the bitwise ops below opset 18 sum their bits with it); a
        # Cast to int64 would sign-extend uint32 and make a value it cannot take a CumSum of.
        # Its optimizer breaks on a Range of run-time length (a causal mask), on a Scan over a
        # constant counter (a fori_loop), on a Scan body that reads none of its scanned inputs
        # (it drops them all), on a Scan body reading a value it also stacks (the
        # blocked cholesky), on a MatMul of a Concat with a broadcast part and on a float64
        # Gemm, on a Slice of step other than 1 after a Reshape, and it refuses a MatMul of two
        # vectors: the rewrites write each so that it runs (core/target_rewrites.py). It has no
        # Loop: one of a trip count and no condition is a Scan over Range(0, trips). It takes a
        # one-element integer constant read by a Mul in a Scan body for a mask and refuses the Scan.
        # Its float ReduceMax of only -inf is the lowest finite float (ReduceMin of +inf the largest).
        # It keeps the states of a Scan in a Scan body from one outer step to the next (not reset
        # to their initial values): step 0 of one over a counter (given one where it scans data)
        # reads the initial values. A Scan of 0 steps gives zeros as its states (not the initial ones).
        # It aborts the process on a float ReduceSum over an empty last axis (given a zero more)
        # and on loading a uint32 MatMul (computed on int32, which wraps the same).
        # Its Mul(x, x) of integers is a Square that saturates or has no kernel. ScatterND's
        # reductions below their opset (a Loop) are written without a loop
        # Its ReduceMax/Min have no uint32 kernel, and below opset 15 a uint32 widened to int64 by
        # a Cast became its symbolic-dim type, wrong along an axis: uint32 is kept, reduced on halves.
        kernels={"CumSum": _CUMSUM_UINT32, **dict.fromkeys(("ReduceMax", "ReduceMin"), _REDUCE_EXTREMES_UINT32)},
        rewrites=("scatter_loop_as_one_hot", "reduce_extremes_of_infinities", "uint32_extremes_on_halves", "nan_propagating_max_min", "isnan_as_not_equal", "int64_cast_as_castlike", "bool_equal_as_xor", "integer_square_as_product", "compress_as_gather", "range_as_cumsum", "counted_loop_as_scan", "counter_scan_as_state", "scan_int_factors_as_states", "inner_scans_restarted", "scan_of_no_steps_keeps_states", "scan_inputs_read", "scan_outputs_unread", "gemm_as_matmul",
                  "vector_dot_as_matrix_product", "strided_slice_as_gather", "runtime_slice_as_gather", "expand_full_rank",
                  "float_sum_over_empty_last_axis", "uint32_matmul_as_int32"),
        # (it reads an empty uint32 initializer as int32, and finds no type for a Range of run-time
        # length that a Scan body reads from outside)
        late_rewrites=("empty_constants_as_constant_of_shape", "ranges_in_scan_bodies"),
        lacks={"Loop": "tract 0.23 has no Loop, and a while_loop whose condition depends on the data "
                       "(not a fixed number of steps) has no exact Scan form: export with loop_bound=N "
                       "(CLI: --loop-bound N) to write it as a Scan of at most N steps (float results NaN "
                       "where N steps do not finish it), or write it as a fori_loop or scan (of static "
                       "or traced length)"},
    ),
    "tensorrt": Target(
        "tensorrt", max_opset=20, model_functions=False, scan_symbolic=True, ops=_TENSORRT_OPS,
        lacks={**dict.fromkeys(("BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot"), _TENSORRT_NO_BITS),
               "DFT": "TensorRT 10 has no DFT (jnp.fft); an axis up to 4096 long is a MatMul, a longer one is not "
                      "written: compute that transform outside the model"},
    ),
})

DEFAULT_TARGET = "onnxruntime"


def get_target(target: str | Target | None) -> Target:
    """The profile for a target name (None: onnxruntime); a :class:`Target` is used as given."""
    if isinstance(target, Target):
        return target
    name = DEFAULT_TARGET if target is None else target
    if name not in TARGETS:
        raise ValueError(f"unknown target {name!r}; choose one of {', '.join(TARGETS)}")
    return TARGETS[name]
