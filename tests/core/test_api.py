"""to_onnx end to end: specs, names, symbolic dims, float64, inlining, errors, determinism."""

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest
from jax import export as jax_export

from jax2onnx_nn import ConversionError, SpecError, to_onnx, verify
from jax2onnx_nn.core.source_locations import portable_location, portable_path
from jax2onnx_nn.testing import assert_exports_match


def _dims(vi):
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


def test_readme_function_symbolic_batch():
    def f(x, w):
        return jnp.tanh(x @ w).sum(axis=-1)

    model = assert_exports_match(f, [("B", 30), (30, 4)], sizes={"B": [1, 5, 64]})
    assert [i.name for i in model.graph.input] == ["x", "w"]
    assert _dims(model.graph.input[0]) == ["B", 30]
    assert _dims(model.graph.output[0]) == ["B"]
    assert model.graph.output[0].name == "out_0"


def test_several_symbolic_names_are_one_scope():
    def f(x, y):
        return (x[:, :, None] * y[:, None, :]).sum(-1) + x

    model = assert_exports_match(f, [("B", "T"), ("B", "T")], sizes={"B": [1, 3], "T": [2, 5]})
    assert _dims(model.graph.input[1]) == ["B", "T"]


def test_shape_dtype_struct_with_constraints_and_dim_arithmetic():
    b, t = jax_export.symbolic_shape("b, t", constraints=("t >= 2",))

    def f(x):
        y = x.reshape((x.shape[0] * x.shape[1],))
        return y[: x.shape[1] // 2 * 2] * x.shape[0]

    spec = jax.ShapeDtypeStruct((b, t), jnp.float32)
    model = assert_exports_match(f, [spec], sizes={"b": [1, 4], "t": [2, 7]})
    assert _dims(model.graph.input[0]) == ["b", "t"]


def test_string_dim_expressions():
    def f(x, y):
        return jnp.concatenate([x, x], axis=0) + y

    assert_exports_match(f, [("B", 3), ("2*B", 3)], sizes={"B": [1, 4]})


def test_pytree_inputs_outputs_and_names():
    def f(params, x):
        h = x @ params["w"] + params["b"]
        return {"h": h, "s": h.sum()}

    specs = [{"w": (4, 3), "b": (3,)}, ("B", 4)]
    model = assert_exports_match(f, specs, sizes={"B": [2]})
    assert [i.name for i in model.graph.input] == ["params/b", "params/w", "x"]
    assert len(model.graph.output) == 2


def test_input_and_output_names_given():
    model = to_onnx(
        lambda a, b: (a + b, a - b),
        [(2,), (2,)],
        input_names=["p", "q"],
        output_names=["sum", "diff"],
    )
    assert [i.name for i in model.graph.input] == ["p", "q"]
    assert [o.name for o in model.graph.output] == ["sum", "diff"]


def test_arrays_pairs_and_scalars_as_specs():
    def f(x, n, scale, flag):
        return jnp.where(flag, x * scale, x) + n

    specs = [np.zeros((2, 3), np.float32), ((), "int32"), 2.0, True]
    model = to_onnx(lambda x, n, s, fl: f(x, n.astype(jnp.float32), s, fl), specs)
    types = [i.type.tensor_type.elem_type for i in model.graph.input]
    assert types == [
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.INT32,
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.BOOL,
    ]
    assert verify(lambda x, n, s, fl: f(x, n.astype(jnp.float32), s, fl), model, specs).ok


def test_input_params_become_named_runtime_inputs():
    def f(x, *, deterministic=False):
        return jnp.where(deterministic, x, x * 2.0)

    model = assert_exports_match(
        f, [("B", 3)], input_params={"deterministic": True}, sizes={"B": [2]}
    )
    assert [i.name for i in model.graph.input] == ["x", "deterministic"]
    sess_out = verify(f, model, [("B", 3)], input_params={"deterministic": False}, sizes={"B": [2]})
    assert sess_out.ok


def test_python_branch_on_a_runtime_flag_names_the_line_and_the_fix():
    def f(x, *, deterministic=False):
        if deterministic:  # the line the error names
            return x
        return x * 2.0

    with pytest.raises(ConversionError) as info:
        to_onnx(f, [("B", 3)], input_params={"deterministic": True})
    text = str(info.value)
    assert f"{__file__}:{f.__code__.co_firstlineno + 1} (f)" in text
    assert (
        "deterministic: bool[]" in text
        and "jnp.where" in text
        and "lax.cond" in text
        and "functools.partial" in text
    )
    assert info.value.__cause__ is None and isinstance(
        info.value.jax_error, jax.errors.TracerBoolConversionError
    )


def test_closed_over_arrays_are_initializers_and_not_duplicated():
    w = jnp.arange(12.0).reshape(3, 4)

    def f(x):
        return x @ w + jax.jit(lambda y: y @ w)(x)

    model = assert_exports_match(f, [("B", 3)], sizes={"B": [1, 3]})
    weights = [i for i in model.graph.initializer if tuple(i.dims) == (3, 4)]
    assert len(weights) == 1


def test_call_like_primitives_are_inlined():
    @jax.custom_jvp
    def softplus(x):
        return jnp.logaddexp(x, 0.0)

    softplus.defjvp(lambda p, t: (softplus(p[0]), t[0] * jax.nn.sigmoid(p[0])))

    @jax.custom_vjp
    def clip_grad(x):
        return x

    clip_grad.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -1, 1),))

    @jax.checkpoint
    def block(x):
        return jnp.sin(x) * 2

    def f(x):
        return jax.jit(block)(clip_grad(softplus(x))) + jax.nn.relu(x) + jax.nn.gelu(x)

    model = assert_exports_match(f, [("B", 5)], sizes={"B": [1, 4]})
    assert all(n.domain == "" for n in model.graph.node)


def test_float64_end_to_end():
    def f(x):
        return jnp.exp(x) @ x.T + 1e-300

    model = assert_exports_match(f, [(3, 3)], enable_double_precision=True)
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.DOUBLE
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.DOUBLE
    assert not jax.config.jax_enable_x64  # restored afterwards


def test_int_and_bool_programs_are_exact():
    def f(a, b):
        return (a * b + 7) // 3, (a > b) & (b > 0)

    assert_exports_match(f, [(("B", 4), "int32"), (("B", 4), "int32")], sizes={"B": [1, 9]})


def test_every_value_is_typed():
    def f(x):
        return jax.nn.softmax(jnp.round(x, 0), axis=-1) * jnp.log1p(jnp.abs(x))

    model = to_onnx(f, [("B", 8)])
    inferred = {vi.name for vi in model.graph.value_info} | {o.name for o in model.graph.output}
    for node in model.graph.node:
        for out in node.output:
            assert out in inferred, f"{out} of {node.op_type} has no type"


def test_nodes_carry_the_users_source_line():
    def f(x):
        y = jnp.tanh(x) * 2.0
        return jax.nn.softmax(y, axis=-1)  # a coarse op: its wrapper's frames are ours, skipped

    model = to_onnx(f, [("B", 8)])
    lines = {n.op_type: n.doc_string for n in model.graph.node}
    here = os.path.basename(__file__)
    first = f.__code__.co_firstlineno
    assert (
        f"{here}:{first + 1}" in lines["Tanh"]
        and "(test_nodes_carry_the_users_source_line.<locals>.f)" in lines["Tanh"]
    )
    assert f"{here}:{first + 2}" in lines["Softmax"]
    # every line is this file's (no frame of jax2onnx_nn's or JAX's), whatever the checkout's folder
    assert all(doc.startswith(f"{portable_path(__file__)}:") for doc in lines.values()), lines


def test_vmapped_library_calls_without_a_user_frame_have_no_misleading_line():
    model = to_onnx(jax.vmap(lambda v: jax.nn.gelu(v, approximate=False)), [("B", 4)])
    docs = [n.doc_string for n in model.graph.node]
    assert docs and all(doc.startswith(f"{portable_path(__file__)}:") for doc in docs), docs


class _Printed:
    """A callable object that counts how often it is printed."""

    reprs = 0

    def __repr__(self) -> str:
        type(self).reprs += 1
        return "_Printed()"

    def __call__(self, x):
        return jnp.tanh(x) * 2.0


def test_an_exported_callable_object_is_never_printed():
    """JAX names each callable it vmaps or traces, formatting any object that is not a
    function (a whole Equinox model pretty-printed) to do it: not while exporting."""
    _Printed.reprs = 0
    model = to_onnx(jax.vmap(_Printed()), [("B", 3)])
    assert _Printed.reprs == 0
    assert [n.op_type for n in model.graph.node] == ["Tanh", "Mul"]
    assert_exports_match(jax.vmap(_Printed()), [("B", 3)])


def test_function_names_while_exporting_are_jaxs():
    import functools

    from jax2onnx_nn.core import jax_internals as jxi

    def f(x):
        return x

    code = f.__code__
    expected = f"f at {code.co_filename}:{code.co_firstlineno}"
    assert jxi._fun_sourceinfo(f) == expected
    assert jxi._fun_sourceinfo(functools.partial(functools.partial(f))) == expected
    assert jxi._fun_sourceinfo(functools.wraps(f)(lambda x: x)) == expected
    assert jxi._fun_sourceinfo(abs) == "abs"
    assert jxi._fun_sourceinfo([].append) == "<unknown>"
    assert jxi._fun_sourceinfo(_Printed()) == "<unknown>"


def _all_nodes(graph):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(attr.g)


def _polyval(p, x):
    return jnp.polyval(p, x)  # a jitted library function with a lax.scan body


def _checkpointed_loop(x):
    import equinox as eqx  # equinox internals: a while loop built inside its own jit

    return eqx.internal.while_loop(
        lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2), (0, x), kind="checkpointed", max_steps=4
    )[1]


@pytest.mark.parametrize(
    "fn, specs", [(_polyval, [(4,), ("B",)]), (_checkpointed_loop, [(3,)])], ids=["jnp", "equinox"]
)
def test_library_bodies_carry_the_callers_line(fn, specs, monkeypatch):
    """Bodies JAX traced inside library code have no user frame: their nodes, and the
    unsupported primitives in them, are reported at the user's line that called the library."""
    first = fn.__code__.co_firstlineno
    # the lines of the call into the library (the equinox call spans three)
    heres = [
        f"{__file__}:{n}:" for n in ([first + 1] if fn is _polyval else range(first + 3, first + 6))
    ]
    pytest.importorskip("equinox")
    try:
        model = to_onnx(fn, specs)
    except ConversionError as err:  # a JAX whose jnp.polyval is one primitive we do not lower
        locations = [loc for use in err.unsupported for loc in use.locations]
        assert all(loc.startswith(tuple(heres)) for loc in locations), locations
    else:
        docs = {n.doc_string for n in _all_nodes(model.graph)}  # (the model's are portable)
        portable = tuple(portable_location(here[:-1]) + ":" for here in heres)
        assert docs and all(d.startswith(portable) for d in docs), docs
    from jax2onnx_nn.core import registry

    monkeypatch.delitem(registry._RULES, "mul")  # make an op of the body unsupported
    # jax >= 0.12 binds jnp.polyval as one `polynomial` primitive: without its rule it is lowered
    # through its JAX implementation, a library body whose mul is then unsupported
    monkeypatch.delitem(registry._RULES, "polynomial", raising=False)
    with pytest.raises(ConversionError) as info:
        to_onnx(fn, specs)
    locations = [loc for use in info.value.unsupported for loc in use.locations]
    assert locations and all(loc.startswith(tuple(heres)) for loc in locations), locations


def test_same_export_twice_is_byte_identical():
    def f(x, w):
        return jax.nn.relu(x @ w) * 2

    a = to_onnx(f, [("B", 3), (3, 3)]).SerializeToString()
    b = to_onnx(f, [("B", 3), (3, 3)]).SerializeToString()
    assert a == b


def test_opset_bounds_and_choice():
    model = to_onnx(jnp.sin, [(2,)], opset=17)
    assert model.opset_import[0].version == 17
    with pytest.raises(ValueError, match="opset must be between 13"):
        to_onnx(jnp.sin, [(2,)], opset=12)


def _host_callback(x):
    return jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)


def test_unsupported_primitives_are_listed_with_source_lines(tmp_path):
    def f(x):
        y = _host_callback(x)
        return _host_callback(y) + 1

    path = tmp_path / "m.onnx"
    with pytest.raises(ConversionError) as info:
        to_onnx(f, [(3,)], path=path)
    message = str(info.value)
    assert "pure_callback (used 2x)" in message
    assert "test_api.py" in message
    assert info.value.unsupported[0].count == 2
    assert not path.exists()
    assert [p for p in os.listdir(tmp_path)] == []


def test_library_primitive_lowered_through_its_jax_implementation():
    prim = jax.extend.core.Primitive("scaled_softsign")

    def impl(x, *, scale):
        return scale * x / (1 + jnp.abs(x))

    prim.def_impl(impl)
    prim.def_abstract_eval(lambda x, *, scale: jax.core.ShapedArray(x.shape, x.dtype))

    def f(x):
        return prim.bind(x, scale=3.0) + 1

    assert_exports_match(f, [("B", 4)], sizes={"B": [2]})


@pytest.mark.parametrize(
    "spec, message",
    [
        ("B,30", "expected a shape tuple"),
        ((("B", 30), "no-such-dtype"), "is not a dtype"),
        ((-1, 3), "negative dim"),
        (("B+", 3), "cannot parse the symbolic dim"),
    ],
)
def test_bad_specs_name_the_argument(spec, message):
    with pytest.raises(SpecError, match=message):
        to_onnx(lambda x: x, [spec])


def test_inputs_must_be_a_list():
    with pytest.raises(SpecError, match="one spec per positional argument"):
        to_onnx(lambda x: x, ("B", 3))


def test_a_path_is_written_atomically_and_returned(tmp_path):
    def f(x):
        return x * 2

    path = tmp_path / "f.onnx"
    written = to_onnx(f, [("B", 2)], path=path)
    assert written == str(path) and isinstance(written, str)
    assert onnx.load(written).SerializeToString() == to_onnx(f, [("B", 2)]).SerializeToString()
    assert sorted(os.listdir(tmp_path)) == ["f.onnx"]


def test_key_input_becomes_uint32_data():
    key = jax.random.key(0)
    model = to_onnx(lambda k: jax.random.key_data(k), [key])
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.UINT32
    assert _dims(model.graph.input[0]) == [2]


def test_verify_can_compile_the_reference():
    def f(x):
        return jnp.tanh(x) @ x.T

    model = to_onnx(f, [("B", 4)])
    eager = verify(f, model, [("B", 4)], sizes={"B": [1, 3]})
    compiled = verify(f, model, [("B", 4)], sizes={"B": [1, 3]}, jit=True)
    assert eager.ok and compiled.ok and compiled.max_abs == pytest.approx(eager.max_abs, abs=1e-6)

    def needs_values(x):  # a reference jax.jit cannot compile runs op by op
        return x * float(jnp.max(x) > 0)

    model = to_onnx(lambda x: x * (jnp.max(x) > 0).astype(x.dtype), [(4,)])
    verify(needs_values, model, [(4,)], jit=True).raise_if_failed()


def test_graph_inputs_are_named_after_the_positional_parameters_of_any_callable():
    """Names come from the signature of a function, a callable object, a partial and a jitted
    function alike (asked once per function code)."""

    def f(a, b, /, c, *rest, d=1):
        return a + b * c

    class Scaled:
        def __call__(self, u, v):
            return u * v

    def names(fn, n):
        return [i.name for i in to_onnx(fn, [(2,)] * n).graph.input]

    for _ in range(2):  # (the second time from the memo)
        assert names(f, 3) == ["a", "b", "c"]
        assert names(Scaled(), 2) == ["u", "v"]
        assert names(functools.partial(f, np.ones(2, np.float32)), 2) == ["b", "c"]
        assert names(jax.jit(f), 3) == ["a", "b", "c"]
