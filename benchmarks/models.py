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


def _gpt2(
    size: str, config: dict[str, Any] | None = None, **options: Any
) -> tuple[Any, list[Any], dict[str, Any]]:
    import dataclasses

    from flax import nnx

    gpt2 = importlib.import_module("examples.flax_gpt2")
    config = dataclasses.replace(
        gpt2.GPTConfig.gpt2() if size == "124m" else gpt2.GPTConfig.small(), **(config or {})
    )
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


def _vmapped_eqx(
    module_name: str, factory: str, inputs: list[Any], **options: Any
) -> tuple[Any, list[Any], dict[str, Any]]:
    """An Equinox example batched with ``jax.vmap`` over a symbolic B, in inference mode."""
    import equinox as eqx

    model = getattr(importlib.import_module(module_name), factory)(jax.random.key(0))
    return jax.vmap(eqx.nn.inference_mode(model)), inputs, options


def eqx_mlp() -> tuple[Any, list[Any], dict[str, Any]]:
    return _vmapped_eqx("examples.eqx_mlp", "Classifier", [("B", 784)])


def eqx_transformer() -> tuple[Any, list[Any], dict[str, Any]]:
    transformer = importlib.import_module("examples.eqx_transformer")
    return _vmapped_eqx(
        "examples.eqx_transformer",
        "TransformerBlock",
        [("B", transformer.SEQUENCE, transformer.WIDTH)],
        opset=23,
    )


def eqx_vit() -> tuple[Any, list[Any], dict[str, Any]]:
    vit = importlib.import_module("examples.eqx_vit")
    return _vmapped_eqx(
        "examples.eqx_vit", "VisionTransformer", [("B", vit.CHANNELS, vit.IMAGE, vit.IMAGE)]
    )


def vit() -> tuple[Any, list[Any], dict[str, Any]]:
    """The tiny Flax ViT of examples/flax_vit.py, in inference mode."""
    from flax import nnx

    from jax2onnx_nn.flax import mode_copy

    vit_module = importlib.import_module("examples.flax_vit")
    config = vit_module.ViTConfig.small()
    return mode_copy(vit_module.ViT(config, rngs=nnx.Rngs(0))), config.images, {}


def gpt_4l() -> tuple[Any, list[Any], dict[str, Any]]:
    """A 4-layer GPT of width 256 (8 heads), symbolic batch and sequence, no functions."""
    return _gpt2(
        "small",
        config={"n_layer": 4, "n_embd": 256, "n_head": 8, "block_size": 64},
        auto_functions=False,
    )


def gpt2_layers(n_layer: int) -> tuple[Any, list[Any], dict[str, Any]]:
    """GPT-2 124M's width with ``n_layer`` blocks (export time per layer)."""
    return _gpt2("124m", config={"n_layer": n_layer})


def gru() -> tuple[Any, list[Any], dict[str, Any]]:
    from flax import nnx

    from jax2onnx_nn.flax import mode_copy

    module = importlib.import_module("examples.flax_gru")
    model = module.GRUClassifier(module.FEATURES, module.HIDDEN, module.CLASSES, rngs=nnx.Rngs(0))
    return mode_copy(model), list(module.SEQUENCES), {}


def linen_gru() -> tuple[Any, list[Any], dict[str, Any]]:
    """The GRU classifier's sizes in Linen: nn.RNN over a GRUCell, then a Dense on the last h."""
    import jax.numpy as jnp
    from flax import linen as nn

    module = importlib.import_module("examples.flax_gru")

    class LinenGRUClassifier(nn.Module):
        @nn.compact
        def __call__(self, xs: jax.Array) -> jax.Array:
            return nn.Dense(module.CLASSES)(nn.RNN(nn.GRUCell(module.HIDDEN))(xs)[:, -1])

    model = LinenGRUClassifier()
    variables = model.init(jax.random.key(0), jnp.zeros((1, 4, module.FEATURES)))

    def linen_gru(xs: jax.Array) -> jax.Array:
        return model.apply(variables, xs)

    return linen_gru, list(module.SEQUENCES), {}


HEAT_STEPS, HEAT_POINTS = 200, 256


def _heat_step(u: jax.Array) -> jax.Array:
    import jax.numpy as jnp

    dx = 1.0 / (u.shape[0] - 1)
    lap = (u[:-2] - 2.0 * u[1:-1] + u[2:]) / (dx * dx)
    interior = u[1:-1] + 0.4 * dx * dx * lap
    return jnp.concatenate([jnp.zeros((1,), u.dtype), interior, jnp.zeros((1,), u.dtype)])


def heat_fori() -> tuple[Any, list[Any], dict[str, Any]]:
    """float64 explicit heat equation, 200 steps of a fori_loop on a 256-point grid."""

    def heat_fori(u0: jax.Array) -> jax.Array:
        return jax.lax.fori_loop(0, HEAT_STEPS, lambda i, u: _heat_step(u), u0)

    return heat_fori, [((HEAT_POINTS,), "float64")], {"enable_double_precision": True}


def heat_while() -> tuple[Any, list[Any], dict[str, Any]]:
    """The same stepper as a while_loop on a step counter."""
    import jax.numpy as jnp

    def heat_while(u0: jax.Array) -> jax.Array:
        def body(state: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
            i, u = state
            return i + 1, _heat_step(u)

        return jax.lax.while_loop(
            lambda s: s[0] < HEAT_STEPS, body, (jnp.zeros((), jnp.int32), u0)
        )[1]

    return heat_while, [((HEAT_POINTS,), "float64")], {"enable_double_precision": True}


def big_mlp(params_m: int) -> tuple[Any, list[Any], dict[str, Any]]:
    """An MLP of 4096-wide Linear layers with about ``params_m`` million float32 parameters."""
    from flax import nnx

    width = 4096
    depth = max(1, round(params_m * 1e6 / (width * width + width)))

    class BigMLP(nnx.Module):
        def __init__(self, *, rngs: nnx.Rngs) -> None:
            self.layers = nnx.List([nnx.Linear(width, width, rngs=rngs) for _ in range(depth)])

        def __call__(self, x: jax.Array) -> jax.Array:
            for layer in self.layers:
                x = nnx.relu(layer(x))
            return x

    return BigMLP(rngs=nnx.Rngs(0)), [("B", width)], {}


def in_dtype(model: Any, specs: list[Any], dtype: Any) -> tuple[Any, list[Any]]:
    """A Flax NNX ``model`` and its input ``specs`` in ``dtype`` (bfloat16, float16): its float
    weights and float inputs cast, and each layer's float32 ``dtype`` made ``dtype``, as building
    it with ``dtype=param_dtype=dtype`` would have (``nnx.Embed`` fixes its ``dtype`` to its
    weights' at construction, so casting the weights alone leaves it computing float32)."""
    import jax.numpy as jnp
    from flax import nnx

    state = jax.tree.map(
        lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a,
        nnx.state(model),
    )
    low = nnx.merge(nnx.graphdef(model), state)
    for _, module in nnx.iter_graph(low):
        if isinstance(module, nnx.Module) and getattr(module, "dtype", None) == jnp.float32:
            module.dtype = dtype
    name = jnp.dtype(dtype).name
    return low, [spec if isinstance(spec[0], tuple) else (tuple(spec), name) for spec in specs]


def _qwix_mlp(weight_qtype: str, tile_size: int | None) -> tuple[Any, list[Any], dict[str, Any]]:
    """flax_mlp's layout at width 256, 3 layers, quantized by qwix (PTQ, weight-only)."""
    import jax.numpy as jnp
    import qwix
    from flax import nnx

    class MLP(nnx.Module):
        def __init__(self, *, rngs: nnx.Rngs) -> None:
            self.layers = nnx.List([nnx.Linear(256, 256, rngs=rngs) for _ in range(3)])

        def __call__(self, x: jax.Array) -> jax.Array:
            for layer in self.layers[:-1]:
                x = nnx.relu(layer(x))
            return self.layers[-1](x)

    rules = [
        qwix.QuantizationRule(module_path=".*", weight_qtype=weight_qtype, tile_size=tile_size)
    ]
    model = qwix.quantize_model(MLP(rngs=nnx.Rngs(0)), qwix.PtqProvider(rules), jnp.ones((1, 256)))
    return model, [("B", 256)], {}


def qwix_mlp_int8() -> tuple[Any, list[Any], dict[str, Any]]:
    """A 3-layer 256-wide MLP, int8 weights per output channel (qwix PTQ)."""
    return _qwix_mlp("int8", None)


def qwix_mlp_int4() -> tuple[Any, list[Any], dict[str, Any]]:
    """A 3-layer 256-wide MLP, int4 weights in tiles of 64 (qwix PTQ)."""
    return _qwix_mlp("int4", 64)


def keras_mlp(mode: str | None = None, width: int = 256) -> Any:
    """A 3-layer ``width``-wide relu MLP in Keras 3 (JAX backend), quantized by
    ``model.quantize(mode)`` unless ``mode`` is None."""
    import os

    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((width,)),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(width),
        ]
    )
    if mode is not None:
        model.quantize(mode)
    return model


def keras_mlp_int8() -> tuple[Any, list[Any], dict[str, Any]]:
    """A 3-layer 256-wide Keras MLP, ``model.quantize("int8")`` (int8 weights per output
    channel, int8 activations per row at run time)."""
    return keras_mlp("int8"), [("B", 256)], {}
