"""core/trace_errors.py: each JAX error raised while tracing gets the advice that fits its
cause, names the user's line, and no advice that does not apply."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from examples.heat_equation import heat_solve
from jax2onnx_nn import ConversionError, SpecError, to_onnx


def _while(x):
    while x.sum() > 0:  # the line the error names
        x = x - 1
    return x


def _if(x):
    if x.sum() > 0:  # the line the error names
        return x
    return -x


def _int(x):
    return jnp.zeros(3) * int(x.sum())  # the line the error names


def _bool(x):
    return x * bool(x.sum())  # the line the error names


def _asarray(x):
    return np.asarray(x) + 1  # the line the error names


def _range(x):
    return sum(x[i] for i in range(x.sum().astype(jnp.int32)))  # the line the error names


def _size(x):
    return jnp.zeros(x.sum().astype(jnp.int32))  # the line the error names


_BRANCH = ("jnp.where", "lax.cond")
_FLAGS = ("Dropout", "functools.partial(fn, deterministic")


@pytest.mark.parametrize(
    ("fn", "advice", "not_advice"),
    [
        (
            _while,
            ("jax.lax.while_loop(cond_fun, body_fun, init)", "fori_loop"),
            (*_BRANCH, *_FLAGS),
        ),
        (_if, _BRANCH, ("while_loop", *_FLAGS)),
        (_int, ("x.astype(jnp.int32) for int(x)",), (*_BRANCH, *_FLAGS, "while_loop")),
        (_bool, ("int(), float(), bool() and .item()",), (*_BRANCH, *_FLAGS)),
        (
            _asarray,
            ("use jax.numpy (jnp.asarray, jnp.sin, ...)",),
            (*_BRANCH, *_FLAGS, "while_loop"),
        ),
        (_range, ("jax.lax.fori_loop(0, n, body, init)", "jnp.take(x, i)"), (*_BRANCH, *_FLAGS)),
        (_size, ("take sizes from shapes (x.shape[0]",), ("lax.cond", *_FLAGS, "while_loop")),
    ],
)
def test_a_graph_value_used_in_python_gets_the_fix_that_fits(fn, advice, not_advice):
    with pytest.raises(ConversionError) as info:
        to_onnx(fn, [(3,)])
    text = str(info.value)
    assert f"{__file__}:" in text and f"({fn.__name__})" in text, text
    (fix,) = [line for line in text.splitlines() if line.startswith("Fix: ")]
    assert all(a in fix for a in advice), fix
    assert not any(a in fix for a in not_advice), fix
    assert info.value.__cause__ is None and isinstance(info.value.jax_error, Exception)


def test_a_branch_on_an_input_param_may_also_be_made_static():
    def f(x, *, deterministic=False):
        return x if deterministic else 2 * x

    with pytest.raises(ConversionError) as info:
        to_onnx(f, [(3,)], input_params={"deterministic": True})
    assert all(a in str(info.value) for a in (*_BRANCH, *_FLAGS)), str(info.value)


@pytest.mark.parametrize(
    ("fn", "holds", "fails", "rows"),
    [
        (lambda x: x[:48] if x.shape[0] <= 48 else x[:48] * 2, "S <= 48", "S >= 49", "S"),
        (lambda x: x[:48] * 2 if x.shape[0] > 48 else jnp.zeros((48, 4)), "S >= 49", "S <= 48", 48),
    ],
)
def test_an_undecided_comparison_names_its_dims_and_the_constraint_that_decides_it(
    fn, holds, fails, rows
):
    """Before: 'add constraints=("B >= 2",)' whatever the comparison and the dims."""
    with pytest.raises(SpecError) as info:
        to_onnx(fn, [("S", 4)])
    advice = str(info.value).splitlines()[-1]
    assert f'constraints=("{holds}",)' in advice and f'("{fails}",)' in advice, advice
    assert "B" not in advice.replace("JAX", ""), advice
    model = to_onnx(fn, [("S", 4)], constraints=[holds])  # the advice is enough to export
    dim = model.graph.output[0].type.tensor_type.shape.dim[0]
    assert (dim.dim_param or dim.dim_value) == rows


def test_shapes_that_differ_for_small_sizes_advise_the_constraint_that_makes_them_agree():
    """The heat equation's interior ``u[1:-1]`` plus ``u[2:]``: (max(0, N - 2),) and
    (N - min(N, 2),) agree for N >= 2. Before: 'Change the specs (rank, sizes, ...)'."""
    specs = [(("N",), "float64"), ((), "float64"), ((), "float64")]
    with pytest.raises(SpecError) as info:
        to_onnx(heat_solve, specs, enable_double_precision=True)
    advice = str(info.value).splitlines()[-1]
    assert 'constraints=("N >= 2",)' in advice and "Change the specs" not in advice, advice
    assert to_onnx(
        heat_solve, specs, enable_double_precision=True, constraints=["N >= 2"]
    ).graph.node


def test_shapes_bounded_by_min_advise_the_comparison_over_its_dims():
    """A cache of 48 slots cut to a symbolic length: (B, min(48, S), 4) and (B, S, 4) agree for
    S <= 48. Before: 'No constraint on B and S makes these shapes agree' (and, where the shapes
    did not parse, 'e.g. constraints=("B >= 2",)', a dim the comparison does not involve)."""

    def first_slots(cache, new):
        return cache[:, : new.shape[1]] + new

    specs = [("B", 48, 4), ("B", "S", 4)]
    with pytest.raises(SpecError) as info:
        to_onnx(first_slots, specs)
    advice = str(info.value).splitlines()[-1]
    assert 'constraints=("S <= 48",)' in advice and "give S a fixed size" in advice, advice
    assert "B" not in advice, advice
    model = to_onnx(first_slots, specs, constraints=["S <= 48"])  # the advice is enough
    assert [d.dim_param for d in model.graph.output[0].type.tensor_type.shape.dim[:2]] == ["B", "S"]


def test_shapes_no_constraint_reconciles_say_to_change_the_specs():
    with pytest.raises(SpecError) as info:
        to_onnx(lambda x, y: x + y[1:], [("N",), ("N",)])
    assert (
        str(info.value)
        .splitlines()[-1]
        .startswith("No constraint on N makes these shapes agree: change the specs")
    )
    with pytest.raises(SpecError) as info:
        to_onnx(lambda x, w: x @ w, [("B", 30), (20, 4)])
    assert str(info.value).splitlines()[-1].startswith("Change the specs")


def test_a_reshape_that_may_not_divide_advises_a_multiple_in_the_spec():
    with pytest.raises(SpecError) as info:
        to_onnx(lambda x: x.reshape(-1, 4), [("S", 3)])
    advice = str(info.value).splitlines()[-1]
    assert "'4*K' in place of 'S'" in advice and "constraints=(" not in advice, advice
    assert jax.tree_util.tree_leaves(to_onnx(lambda x: x.reshape(-1, 4), [("4*K", 3)]).graph.output)
