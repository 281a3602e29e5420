"""Models the benchmark exports: each factory returns (callable, input specs, to_onnx options)."""

from __future__ import annotations

import importlib
from typing import Any

import jax


def jax_mlp() -> tuple[Any, list[Any], dict[str, Any]]:
    from jax2onnx_nn.demo import _mlp_function

    return _mlp_function(), [("B", 30)], {}


def flax_mlp() -> tuple[Any, list[Any], dict[str, Any]]:
    from jax2onnx_nn.demo import _flax_mlp
    from jax2onnx_nn.flax import mode_copy

    # inference mode, as exported, so that jax.jit runs the same computation
    return mode_copy(_flax_mlp()), [("B", 30)], {}


def cnn() -> tuple[Any, list[Any], dict[str, Any]]:
    from flax import nnx

    class CNN(nnx.Module):
        def __init__(self, *, rngs: nnx.Rngs) -> None:
            self.conv1 = nnx.Conv(1, 32, kernel_size=(3, 3), rngs=rngs)
            self.conv2 = nnx.Conv(32, 64, kernel_size=(3, 3), rngs=rngs)
            self.linear1 = nnx.Linear(3136, 256, rngs=rngs)
            self.linear2 = nnx.Linear(256, 10, rngs=rngs)

        def __call__(self, x: jax.Array) -> jax.Array:
            x = nnx.avg_pool(nnx.relu(self.conv1(x)), window_shape=(2, 2), strides=(2, 2))
            x = nnx.avg_pool(nnx.relu(self.conv2(x)), window_shape=(2, 2), strides=(2, 2))
            x = x.reshape(x.shape[0], -1)
            return self.linear2(nnx.relu(self.linear1(x)))

    return CNN(rngs=nnx.Rngs(0)), [("B", 28, 28, 1)], {}


def _gpt2(size: str, **options: Any) -> tuple[Any, list[Any], dict[str, Any]]:
    from flax import nnx

    gpt2 = importlib.import_module("examples.flax_gpt2")
    config = gpt2.GPTConfig.gpt2() if size == "124m" else gpt2.GPTConfig.small()
    model = gpt2.GPT(config, rngs=nnx.Rngs(0))
    return model, list(gpt2.TOKENS), {"auto_functions": True, **options}


def gpt2_small() -> tuple[Any, list[Any], dict[str, Any]]:
    return _gpt2("small")


def gpt2_124m() -> tuple[Any, list[Any], dict[str, Any]]:
    return _gpt2("124m")


def gpt2_small_lax() -> tuple[Any, list[Any], dict[str, Any]]:
    """The same model through the lax-level path alone (no coarse ops, no functions)."""
    return _gpt2("small", auto_functions=False, coarse_ops=False)


def gpt2_124m_lax() -> tuple[Any, list[Any], dict[str, Any]]:
    return _gpt2("124m", auto_functions=False, coarse_ops=False)


def _vmapped_eqx(module_name: str, factory: str, inputs: list[Any], **options: Any) -> tuple[Any, list[Any], dict[str, Any]]:
    """An Equinox example batched with ``jax.vmap`` over a symbolic B, in inference mode."""
    import equinox as eqx

    model = getattr(importlib.import_module(module_name), factory)(jax.random.key(0))
    return jax.vmap(eqx.nn.inference_mode(model)), inputs, options


def eqx_mlp() -> tuple[Any, list[Any], dict[str, Any]]:
    return _vmapped_eqx("examples.eqx_mlp", "Classifier", [("B", 784)])


def eqx_transformer() -> tuple[Any, list[Any], dict[str, Any]]:
    transformer = importlib.import_module("examples.eqx_transformer")
    return _vmapped_eqx(
        "examples.eqx_transformer", "TransformerBlock", [("B", transformer.SEQUENCE, transformer.WIDTH)], opset=23
    )


def eqx_vit() -> tuple[Any, list[Any], dict[str, Any]]:
    vit = importlib.import_module("examples.eqx_vit")
    return _vmapped_eqx("examples.eqx_vit", "VisionTransformer", [("B", vit.CHANNELS, vit.IMAGE, vit.IMAGE)])
