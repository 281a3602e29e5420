"""TensorRT 10 (no GPU here: its profile is read from onnx-tensorrt's operator support list)."""

from __future__ import annotations

from jax2onnx_nn.core.targets.profile import Target

# The ops onnx-tensorrt's TensorRT 10.0 importer supports (its docs/operators.md, opsets 9..20;
# re-read at the 10.1-GA release, commit 96e7811 of June 2024: the same list and opsets). It has no
# BitShift, Bitwise*, DFT, STFT or BitCast, so jax.random bit kernels cannot be exported for it, nor
# an FFT along an axis longer than 4096 (shorter ones are MatMuls: core/lowerings/fft.py);
# everything else this exporter emits is there.
_OPS = frozenset(
    """
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
""".split()
)

_NO_BITS = (
    "TensorRT 10 has no integer bit operations (jax.random's threefry kernels use them): "
    "draw the random numbers outside the model and pass them as inputs"
)

PROFILE = Target(
    "tensorrt",
    max_opset=20,
    model_functions=False,
    scan_symbolic=True,
    ops=_OPS,
    lacks={
        **dict.fromkeys(
            ("BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot"), _NO_BITS
        ),
        "DFT": "TensorRT 10 has no DFT (jnp.fft); an axis up to 4096 long is a MatMul, a longer "
        "one is not written: compute that transform outside the model",
    },
)
