"""onnxruntime (CPU): the default target; the exporter's kernel tables (core/kernels.py) are its."""

from __future__ import annotations

from dataclasses import replace

from jax2onnx_nn.core.quant.integer import matmul_integer
from jax2onnx_nn.core.quant.nbits import float_int8_matmul, matmul_nbits
from jax2onnx_nn.core.targets.onnxruntime_attention import (
    packed_attention,
    packed_multi_head_attention,
    packed_onnx_attention,
)
from jax2onnx_nn.core.targets.onnxruntime_gqa import group_query_attention
from jax2onnx_nn.core.targets.onnxruntime_layer_norm import layer_norm_on_rows
from jax2onnx_nn.core.targets.profile import Target

# Quantized weights (core/quant/): a 4-bit weight's matmul is com.microsoft.MatMulNBits at
# accuracy level 1 (weights 4-bit in the session); an 8-bit weight's is Cast -> Mul -> MatMul
# (float in the session); other dequantizations stay DequantizeLinear. An int8 x int8 -> int32
# matmul (dynamic-range activation quantization) is MatMulInteger.
QUANTIZED_REWRITES = (matmul_nbits, float_int8_matmul, matmul_integer)

# 1.32 registers its CPU Attention kernel for opsets 23 and 24; from opset 25 (Attention-25)
# it expands ONNX's function body: 71 small ops, 1.2x the decomposition's time on the ViT-tiny
# of benchmarks/attention_bench.py
# of its contrib ops, MultiHeadAttention takes 0.92x the time of the attention decomposition
# (8x64x8x32 causal, CPU time on one thread; ONNX Attention 0.75x, GroupQueryAttention 0.92x)
PROFILE = Target(
    "onnxruntime",
    # (the If that guards an attention first: its branch's node would be rewritten alone)
    rewrites=(
        *QUANTIZED_REWRITES,
        packed_attention,
        packed_onnx_attention,
        packed_multi_head_attention,
        layer_norm_on_rows,
    ),
    kernel_opsets={"Attention": (23, 24)},
    # MatMulIntegerToFloat: an int8 x int8 matmul and its per-column scale in one node
    # (jax2onnx_nn/keras/quant.py; the same numbers as MatMulInteger -> DequantizeLinear)
    domain_ops=frozenset(
        {
            "com.microsoft.MultiHeadAttention",
            "com.microsoft.MatMulIntegerToFloat",
            "com.microsoft.Attention",
        }
    ),
)

# The onnxruntime target with a decoder's past-taking Attention written as
# com.microsoft.GroupQueryAttention (core/targets/onnxruntime_gqa.py): the same tokens, opt-in
# (``export_decoder(..., target=WITH_GROUP_QUERY_ATTENTION)``) because on the CPU it is not
# faster than ONNX Attention with the past, which the default writes: CPU time on one thread,
# the op alone 0.98-1.07x Attention's time for a 64-256-token prefill and 1.0-1.3x for a decode
# step (docs/genai.md "onnxruntime's GroupQueryAttention"); the whole GPT-2 124M step
# 1.00x (python3 -m benchmarks.genai_bench --compare-attention --cpu).
WITH_GROUP_QUERY_ATTENTION = replace(
    PROFILE,
    rewrites=(*PROFILE.rewrites, group_query_attention),
    domain_ops=PROFILE.domain_ops | {"com.microsoft.GroupQueryAttention"},
)
