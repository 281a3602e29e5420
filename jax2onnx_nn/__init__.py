"""jax2onnx_nn: export JAX functions, Flax NNX and Equinox modules to ONNX.

>>> import jax.numpy as jnp
>>> from jax2onnx_nn import to_onnx
>>> model = to_onnx(lambda x, w: jnp.tanh(x @ w), [("B", 30), (30, 4)])
"""

from jax2onnx_nn.core.registry import builtin_rules

# The composition root: the rules our modules register on import are the built-in layer. The
# registry imports no rule; importing the lowering families here is what fills its table.
with builtin_rules():
    from jax2onnx_nn.core import (
        jax_nn,  # noqa: F401  (jax.nn functions as coarse ops)
        lowerings,  # noqa: F401  (the lax rules, one module per family)
    )
    from jax2onnx_nn.core.api import DEFAULT_OPSET, MAX_OPSET, MIN_OPSET, export_model, to_onnx
    from jax2onnx_nn.core.errors import ConversionError, SpecError, VectorSignWarning
    from jax2onnx_nn.core.functions import onnx_function
    from jax2onnx_nn.core.passes import inline_functions
    from jax2onnx_nn.core.patching import CoarseCall, NotApplicable, coarse_lowering, map_calls
    from jax2onnx_nn.core.registry import lowering, register
    from jax2onnx_nn.core.runtimes import RUNTIMES, RuntimeUnavailable
    from jax2onnx_nn.core.session import register_adapter
    from jax2onnx_nn.core.targets import TARGETS, Target
    from jax2onnx_nn.core.verify import VerifyReport, verify
    from jax2onnx_nn.core.version import __version__

# The adapters shipped with the package, each imported by the first export that runs while
# its framework is imported (core names no framework; other packages register theirs through
# the entry-point group "jax2onnx_nn.adapters").
register_adapter("flax", "jax2onnx_nn.flax.adapter", library="flax")  # NNX, and Linen mode flags
register_adapter("equinox", "jax2onnx_nn.equinox.adapter", library="equinox")
register_adapter("keras", "jax2onnx_nn.keras.adapter", library="keras")

__all__ = [
    "DEFAULT_OPSET",
    "MAX_OPSET",
    "MIN_OPSET",
    "CoarseCall",
    "ConversionError",
    "NotApplicable",
    "RUNTIMES",
    "RuntimeUnavailable",
    "SpecError",
    "TARGETS",
    "Target",
    "VectorSignWarning",
    "VerifyReport",
    "__version__",
    "coarse_lowering",
    "export_model",
    "inline_functions",
    "lowering",
    "map_calls",
    "onnx_function",
    "register",
    "to_onnx",
    "verify",
]
