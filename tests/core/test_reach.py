"""Modules inside closures export exactly like the module itself: an inference-mode copy,
module-path names for weights and nodes, coarse ops and jax.nn activations, for every way a
callable reaches a module (closure cell, global, default, partial argument, bound method,
a dict / list the function closes over)."""

import functools

import jax
import pytest

from jax2onnx_nn import to_onnx, verify

nnx = pytest.importorskip("flax.nnx")
eqx = pytest.importorskip("equinox")


class _Net(nnx.Module):
    def __init__(self, rngs):
        self.linear1 = nnx.Linear(4, 8, rngs=rngs)
        self.bn = nnx.BatchNorm(8, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)
        self.linear2 = nnx.Linear(8, 2, rngs=rngs)

    def __call__(self, x):
        return self.linear2(self.drop(nnx.gelu(self.bn(self.linear1(x)))))

    def predict(self, x):
        return self(x)


NET = _Net(nnx.Rngs(0))  # left in training mode, as users have it
MLP = eqx.nn.MLP(4, 2, 8, 2, activation=jax.nn.gelu, key=jax.random.key(0))


def _nnx_global(x):
    return NET(x)


def _nnx_default(x, model=NET):
    return model(x)


def _eqx_global(x):
    return jax.vmap(MLP)(x)


def _eqx_default(x, model=MLP):
    return jax.vmap(model)(x)


def _forms(module, call):
    """The ways a user wraps ``module``: name -> callable of x."""
    holder = {"net": module}
    listed = [module]

    def closure(x):
        return call(module, x)

    return {
        "lambda": lambda x: call(module, x),
        "closure": closure,
        "partial": functools.partial(call, module),
        "dict": lambda x: call(holder["net"], x),
        "list": lambda x: call(listed[0], x),
    }


def _nnx_call(module, x):
    return module(x)


def _eqx_call(module, x):
    return jax.vmap(module)(x)


NNX_FORMS = {
    **_forms(NET, _nnx_call),
    "global": _nnx_global,
    "default": _nnx_default,
    "method": NET.predict,
}
EQX_FORMS = {**_forms(MLP, _eqx_call), "global": _eqx_global, "default": _eqx_default}


def _summary(model):
    return (
        [n.op_type for n in model.graph.node],
        [n.name for n in model.graph.node],
        sorted(i.name for i in model.graph.initializer),
    )


@pytest.fixture(scope="module")
def nnx_direct():
    return _summary(to_onnx(NET, [("B", 4)]))


@pytest.fixture(scope="module")
def eqx_direct():
    return _summary(to_onnx(jax.vmap(MLP), [("B", 4)]))


@pytest.mark.parametrize("form", list(NNX_FORMS))
def test_nnx_module_in_a_closure_exports_like_the_module(form, nnx_direct):
    ops, nodes, weights = _summary(to_onnx(NNX_FORMS[form], [("B", 4)]))
    assert ops == nnx_direct[0] == ["Gemm", "BatchNormalization", "Gelu", "Gemm"]  # inference mode
    assert nodes == nnx_direct[1] and nodes[0] == "linear1/Gemm"
    assert weights == nnx_direct[2] and {"linear1.kernel", "linear2.kernel"} <= set(weights)
    assert (
        NET.bn.use_running_average is None or not NET.bn.use_running_average
    )  # the user's module is unchanged


@pytest.mark.parametrize("form", list(EQX_FORMS))
def test_eqx_module_in_a_closure_exports_like_the_module(form, eqx_direct):
    ops, nodes, weights = _summary(to_onnx(EQX_FORMS[form], [("B", 4)]))
    assert ops == eqx_direct[0] and ops.count("Gelu") == 2 and len(ops) == 5  # not Mul/Tanh/Add
    assert nodes == eqx_direct[1] and nodes[0] == "layers/0/Gemm"
    assert weights == eqx_direct[2] and "layers.0.weight" in weights


@pytest.mark.parametrize("fn", [NNX_FORMS["lambda"], EQX_FORMS["dict"]], ids=["nnx", "eqx"])
def test_closure_exports_verify_in_inference_mode(fn):
    model = to_onnx(fn, [("B", 4)])
    verify(fn, model, [("B", 4)], sizes={"B": [1, 3]}).raise_if_failed()


def test_several_modules_are_named_by_where_they_are_found():
    other = _Net(nnx.Rngs(1))
    nets = {"a": NET, "b": other}
    model = to_onnx(lambda x: nets["a"](x) + nets["b"](x), [("B", 4)])
    names = {i.name for i in model.graph.initializer}
    assert {"nets.a.linear1.kernel", "nets.b.linear1.kernel"} <= names
    assert {"nets/a/linear1/Gemm", "nets/b/linear2/Gemm"} <= {n.name for n in model.graph.node}
