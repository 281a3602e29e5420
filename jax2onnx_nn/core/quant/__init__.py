"""Quantized weights: the dequantization JAX computes, written as the ONNX forms runtimes run.

A quantized model (qwix, Keras, or written by hand) dequantizes its integer weights in the
program: ``convert(q) * scale`` (``- zero_point`` first for an asymmetric scheme), per
tensor, per axis, or per tile (``reshape -> multiply -> reshape``), before a matmul, a
convolution or an embedding lookup. Lowered op by op that is ``Cast -> Mul``: runtimes fold it
into float weights when the session loads. :mod:`.dequantize` writes it as
``DequantizeLinear`` (the integer weight kept as stored, int4 packed); :mod:`.nbits` writes a
``DequantizeLinear -> MatMul`` of 4-bit weights as onnxruntime's ``MatMulNBits`` for the
onnxruntime targets.
"""
