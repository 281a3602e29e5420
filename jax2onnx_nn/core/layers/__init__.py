"""ONNX layer emitters shared by the lax rules and the framework adapters.

One module per layer family: the arithmetic that maps a layer's configuration onto an ONNX
op (Conv pads from a padding spec, ConvTranspose's pads and kernel, the attention core, RNN
gate order, norm glue, the NaN-exact MaxPool, Gemm or MatMul + Add) is written once here, and
``core/lowerings/*`` and the adapters' ``coarse/`` call it. Modules here know
``LoweringContext`` and numpy, never a framework.
"""
