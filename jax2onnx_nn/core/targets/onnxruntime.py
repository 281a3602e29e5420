"""onnxruntime (CPU): the default target; the exporter's kernel tables (core/kernels.py) are its."""

from __future__ import annotations

from jax2onnx_nn.core.targets.profile import Target

PROFILE = Target("onnxruntime")
