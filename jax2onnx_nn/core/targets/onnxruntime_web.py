"""onnxruntime-web (its WASM build, measured 1.30 under Node.js 20)."""

from __future__ import annotations

from jax2onnx_nn.core.targets.onnxruntime import QUANTIZED_REWRITES
from jax2onnx_nn.core.targets.profile import Target

PROFILE = Target(
    "onnxruntime-web",
    max_opset=26,  # 1.30 refuses 27 (and IR version 14, opset 28's)
    # its WASM build registers fewer type instances than onnxruntime CPU
    kernels={"Where": "i32 i64 u8 f16 f32 f64", "BitShift": "u8 u32 u64"},
    # its Tensor types have no bfloat16 (its Cast to and from bfloat16 runs, 1.30)
    lacks_io_dtypes={"bfloat16": "onnxruntime-web has no JavaScript tensor type for bfloat16"},
    rewrites=QUANTIZED_REWRITES,  # (as onnxruntime's, core/targets/onnxruntime.py)
    # the CPU kernel registrations of onnxruntime's (not timed in the browser build)
    kernel_opsets={"Attention": (23, 24)},
)
