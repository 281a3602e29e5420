"""LLM generation: a JAX decode step with its KV cache exported for onnxruntime-genai.

:func:`export_decoder` writes the folder ``onnxruntime_genai.Model`` opens;
:func:`generate_onnx` generates with it in plain onnxruntime, :func:`generate_jax` with the
JAX step (the reference), :func:`generate_genai` in onnxruntime-genai.
"""

from jax2onnx_nn.genai.export import CacheSpec, DecoderExport, export_decoder, genai_config
from jax2onnx_nn.genai.generate import (
    generate_genai,
    generate_jax,
    generate_onnx,
    padded_prompts,
)

__all__ = [
    "CacheSpec",
    "DecoderExport",
    "export_decoder",
    "genai_config",
    "generate_genai",
    "generate_jax",
    "generate_onnx",
    "padded_prompts",
]
