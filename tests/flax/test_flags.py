"""Runtime mode flags (``input_params``) switching nnx and Linen Dropout / BatchNorm inside
one graph: each flag value computes what JAX computes, Dropout masks bit for bit."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from jax2onnx_nn import ConversionError, to_onnx
from jax2onnx_nn.core.session import adapters
from tests.flags import assert_flag_switches, with_mask
from tests.flax.helpers import node_ops


class Net(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(6, 5, rngs=rngs)
        self.dropout = nnx.Dropout(0.5, rngs=rngs)
        self.bn = nnx.BatchNorm(5, rngs=rngs)
        self.head = nnx.Dropout(0.3, rngs=rngs)

    def __call__(self, x: jax.Array, *, deterministic: Any = None) -> jax.Array:
        y = self.bn(
            self.dropout(self.linear(x), deterministic=deterministic),
            use_running_average=deterministic,
        )
        return self.head(y, deterministic=deterministic)


NET = Net(nnx.Rngs(0))


def test_nnx_dropout_and_batch_norm_follow_a_runtime_flag() -> None:
    # the Dropout key is drawn from the module's stream at export time: the same mask as JAX's
    model = assert_flag_switches(
        lambda x, deterministic: with_mask(NET(x, deterministic=deterministic)),
        [("B", 6)],
        "deterministic",
    )
    ops = node_ops(model)
    assert (
        "BatchNormalization" in ops and "Where" in ops
    )  # inference still the coarse op; modes selected
    assert (
        NET.dropout.deterministic is False and NET.bn.use_running_average is False
    )  # the user's module unchanged


@pytest.mark.parametrize(
    "key_spec",
    [pytest.param(jax.random.key(0), marks=pytest.mark.slow), ((2,), "uint32")],
    ids=["typed", "uint32"],
)
def test_nnx_dropout_key_as_input(key_spec: Any) -> None:
    # a mask per run: the key is a graph input (random keys, one per verify run)
    dropout = nnx.Dropout(0.5, rngs=nnx.Rngs(0))
    fn = lambda x, key, deterministic: with_mask(  # noqa: E731
        dropout(x, deterministic=deterministic, rngs=key)
    )
    assert_flag_switches(fn, [("B", 8), key_spec], "deterministic", sizes={"B": [1, 9]})


class MixedFlags(nnx.Module):
    """A runtime-flag Dropout, then one always in training mode on the same stream: the second
    mask depends on whether the first drew (JAX advances the stream only in training)."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.first = nnx.Dropout(0.5, rngs=rngs)
        self.second = nnx.Dropout(0.5, rngs=rngs)
        self.bn = nnx.BatchNorm(4, rngs=rngs)

    def __call__(self, x: jax.Array, flag: Any) -> tuple[jax.Array, jax.Array, jax.Array]:
        y = self.second(self.first(x, deterministic=flag), deterministic=False)
        return self.bn(y, use_running_average=flag), self.bn.mean[...], self.bn.var[...]


@pytest.mark.slow
def test_nnx_state_left_by_a_flagged_call_is_jaxs() -> None:
    # RNG count and running statistics after the call: the training call's only for flag false
    mixed = MixedFlags(nnx.Rngs(2))
    assert_flag_switches(lambda x, flag: mixed(x, flag), [("B", 4)], "flag")


class LinenNet(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array, train: Any) -> jax.Array:
        x = nn.Dense(5)(x)
        x = nn.Dropout(0.5, deterministic=jnp.logical_not(train))(x)  # the flag as a field
        x = nn.BatchNorm(use_running_average=jnp.logical_not(train))(x)
        return nn.Dropout(0.2)(x, deterministic=jnp.logical_not(train))  # the flag as an argument


LINEN = LinenNet()
VARIABLES = LINEN.init(
    {"params": jax.random.key(0), "dropout": jax.random.key(1)}, jnp.ones((2, 6)), train=False
)


def test_linen_dropout_and_batch_norm_follow_a_runtime_flag() -> None:
    # the key is a graph input; the updated batch_stats are outputs (unchanged for train false)
    def fn(x: jax.Array, key: jax.Array, train: Any) -> Any:
        return LINEN.apply(
            VARIABLES, x, train=train, rngs={"dropout": key}, mutable=["batch_stats"]
        )

    model = assert_flag_switches(fn, [("B", 6), jax.random.key(0)], "train")
    assert len(model.graph.output) == 3  # y, batch_stats mean and var


def test_linen_dropout_mask_is_bit_exact() -> None:
    dropout = nn.Dropout(0.5)

    def fn(x, key, deterministic):
        return with_mask(dropout.apply({}, x, deterministic=deterministic, rngs={"dropout": key}))

    assert_flag_switches(fn, [("B", 8), jax.random.key(0)], "deterministic", sizes={"B": [1, 9]})


LINEN_ATTENTION = nn.MultiHeadDotProductAttention(num_heads=2, dropout_rate=0.5)
LINEN_ATTENTION_PARAMS = LINEN_ATTENTION.init(
    jax.random.key(0), jnp.ones((1, 3, 8)), deterministic=True
)


@pytest.mark.slow
def test_linen_attention_dropout_follows_a_runtime_flag() -> None:
    def fn(q: jax.Array, key: jax.Array, deterministic: Any) -> jax.Array:
        return LINEN_ATTENTION.apply(
            LINEN_ATTENTION_PARAMS, q, deterministic=deterministic, rngs={"dropout": key}
        )

    assert_flag_switches(fn, [("B", 3, 8), jax.random.key(0)], "deterministic", sizes={"B": [1, 2]})


class PythonNot(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array, train: Any) -> jax.Array:
        return nn.Dropout(0.5, deterministic=not train)(x)  # error line: linen_not


class PythonIf(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.dropout = nnx.Dropout(0.5, rngs=rngs)

    def __call__(self, x: jax.Array, deterministic: Any) -> jax.Array:
        if deterministic:  # error line: nnx_if
            return x
        return self.dropout(x, deterministic=False)


def _marked_line(case: str) -> int:
    with open(__file__) as source:
        return next(
            i for i, text in enumerate(source, 1) if text.rstrip().endswith(f"# error line: {case}")
        )


@pytest.mark.parametrize("case", ["linen_not", "nnx_if"])
def test_python_branch_on_the_flag_names_the_users_line(case: str) -> None:
    if case == "linen_not":
        fn = lambda x, train: PythonNot().apply(  # noqa: E731
            {}, x, train, rngs={"dropout": jax.random.key(0)}
        )
    else:
        module = PythonIf(nnx.Rngs(0))
        fn = lambda x, train: module(x, train)  # noqa: E731
    with pytest.raises(ConversionError) as info:
        to_onnx(fn, [("B", 3)], input_params={"train": True})
    text = str(info.value)
    assert f"{__file__}:{_marked_line(case)} (__call__)" in text
    assert "jnp.where" in text and "jnp.logical_not" in text and "functools.partial" in text


def test_readme_example_runs() -> None:
    # a reseeded stream whose key is a graph input (a typed key spec)
    readme = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "runtime-flags.md").read_text()
    code = (
        readme.split("<!-- example: runtime-flags -->", 1)[1]
        .split("```python\n", 1)[1]
        .split("```", 1)[0]
    )
    exec(compile(code, "docs/runtime-flags.md", "exec"), {})


def test_the_flax_adapter_runs_for_linen_alone() -> None:
    (adapter,) = [a for a in adapters() if a.module == "jax2onnx_nn.flax.adapter"]
    assert adapter.trigger == "flax"  # imported by flax.linen, which does not import flax.nnx


@pytest.mark.slow
def test_linen_alone_is_enough(tmp_path: pathlib.Path) -> None:
    # a program that imports Linen but never nnx gets the flag wrappers too (a fresh process)
    script = tmp_path / "linen_only.py"
    script.write_text(
        "import sys\nimport jax\nimport flax.linen as nn\nfrom jax2onnx_nn import to_onnx\n"
        "assert 'flax.nnx' not in sys.modules\n"
        "key = jax.random.key(0)\n"
        "fn = lambda x, d: nn.Dropout(0.5).apply({}, x, deterministic=d, rngs={'dropout': key})\n"
        "model = to_onnx(fn, [('B', 4)], input_params={'d': True})\n"
        "print(sorted({n.op_type for n in model.graph.node}))\n"
        # the coarse ops' module is imported inside this export, with jax.nn already patched:
        # the cell's default gate_fn (jax.nn.sigmoid as flax imported it) is still recognised
        "cell = nn.GRUCell(3)\n"
        "zeros = jax.numpy.zeros\n"
        "variables = cell.init(jax.random.key(0), zeros((1, 3)), zeros((1, 2)))\n"
        "model = to_onnx(lambda h, x: cell.apply(variables, h, x), [('B', 3), ('B', 2)])\n"
        "print([n.op_type for n in model.graph.node for a in n.attribute for n in a.g.node])\n"
    )
    root = pathlib.Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert (
        "'Where'" in result.stdout and "'BitShift'" in result.stdout
    )  # both modes, JAX's threefry mask
    assert "'GRU'" in result.stdout.splitlines()[-1]
