"""Input specs as users and other tools write them: valid ones export and verify, invalid ones
raise SpecError naming the argument, what was given and what was expected."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax import export as jax_export

from jax2onnx_nn import SpecError, to_onnx
from jax2onnx_nn.testing import assert_exports_match


def _dims(vi):
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


def _elem_types(model):
    return [i.type.tensor_type.elem_type for i in model.graph.input]


def _double(tree):
    """An elementwise function for every dtype (exact for ints and bools)."""
    return jax.tree_util.tree_map(lambda a: ~a if a.dtype == jnp.bool_ else a + a, tree)


# -- ShapeDtypeStructs with dim names ------------------------------------------------------


def test_shape_dtype_struct_with_names_is_a_shape_tuple():
    specs = [jax.ShapeDtypeStruct(("B", 30), jnp.float32), ("B", 30)]
    model = assert_exports_match(lambda x, y: x * y, specs, sizes={"B": [1, 5]})
    assert [_dims(i) for i in model.graph.input] == [["B", 30], ["B", 30]]


def test_keras_style_image_struct():
    spec = jax.ShapeDtypeStruct(("batch", 8, 8, 3), "float32")
    model = assert_exports_match(
        lambda x: jnp.mean(x, axis=(1, 2)), [spec], sizes={"batch": [1, 2]}
    )
    assert _dims(model.graph.input[0]) == ["batch", 8, 8, 3]
    assert _dims(model.graph.output[0]) == ["batch", 3]


def test_struct_dim_expressions_int_and_bool():
    specs = [
        jax.ShapeDtypeStruct(("B", "2*B"), jnp.int32),
        jax.ShapeDtypeStruct(("B",), jnp.bool_),
    ]

    def f(x, m):
        return jnp.where(m[:, None], x[:, : x.shape[0]], -x[:, x.shape[0] :])

    model = assert_exports_match(f, specs, sizes={"B": [1, 4]})
    assert _dims(model.graph.input[0]) == ["B", "2*B"]
    assert _dims(model.graph.output[0]) == ["B", "B"]


def test_struct_names_join_user_made_symbolic_dims():
    (b,) = jax_export.symbolic_shape("B")
    specs = [jax.ShapeDtypeStruct((b, 3), jnp.float32), jax.ShapeDtypeStruct(("B", 3), jnp.float32)]
    model = assert_exports_match(lambda x, y: x - y, specs, sizes={"B": [2]})
    assert _dims(model.graph.output[0]) == ["B", 3]


def test_pytree_of_structs_names_are_shared():
    specs = [{"a": jax.ShapeDtypeStruct(("N", 2), jnp.float32), "b": [(("N",), "int32")]}]
    model = assert_exports_match(lambda t: t["a"].sum(1) + t["b"][0], specs, sizes={"N": [3]})
    assert [_dims(i) for i in model.graph.input] == [["N", 2], ["N"]]


# -- 64-bit inputs without enable_double_precision ----------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        np.linspace(-1, 1, 12).reshape(3, 4),
        ((3, 4), "float64"),
        jax.ShapeDtypeStruct((3, 4), np.float64),
    ],
    ids=["array", "pair", "struct"],
)
def test_float64_without_x64_is_float32_as_in_jit_and_warns_once(spec):
    with pytest.warns(UserWarning, match="enable_double_precision") as caught:
        model = to_onnx(lambda x, y: jnp.tanh(x) + y, [spec, spec])
    (warning,) = [w for w in caught if "enable_double_precision" in str(w.message)]
    assert "inputs[0] (x) float64 -> float32; inputs[1] (y) float64 -> float32" in str(
        warning.message
    )
    assert warning.filename == __file__  # points at the user's to_onnx call
    assert _elem_types(model) == [1, 1]  # FLOAT
    x = np.linspace(-1, 1, 12).reshape(3, 4)  # float64 values, as a user passes them
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_exports_match(lambda x, y: jnp.tanh(x) + y, [spec, spec], input_values=[x, x])


def test_int64_without_x64_is_int32_and_python_types_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # float / int mean the default width: no warning
        model = to_onnx(lambda x, y: x + y.astype(x.dtype), [((3,), float), ((3,), int)])
    assert _elem_types(model) == [1, 6]  # FLOAT, INT32
    with pytest.warns(UserWarning, match="int64 -> int32"):
        model = to_onnx(lambda x: x * 2, [((3,), "int64")])
    assert _elem_types(model) == [6]


def test_float64_with_x64_stays_float64():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = to_onnx(jnp.tanh, [((3,), "float64")], enable_double_precision=True)
    assert _elem_types(model) == [11]  # DOUBLE


# -- bad specs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, message",
    [
        (
            (None, 30),
            r"inputs\[0\] \(x\), dim 0: None is not a dim in \(None, 30\).*use a name such as 'B'",
        ),
        ((2.5, 3), r"inputs\[0\] \(x\), dim 0: 2.5 is not a dim"),
        (("B", True), r"dim 1: True is not a dim"),
        (("", 30), r"dim 0: the empty string is not a dim name"),
        ((-1, 3), "negative dim -1"),
        (("B+", 3), r"inputs\[0\] \(x\): cannot parse the symbolic dim 'B\+'"),
        (("B, T", 3), r"'B, T' holds 2 dims; give one dim per entry, as in \('B', 'T'\)"),
        (jax.ShapeDtypeStruct(("", 3), jnp.float32), "the empty string is not a dim name"),
        ({"w": [(3, 4), (None, 4)]}, r"inputs\[0\] \(x\)\['w'\]\[1\], dim 0: None is not a dim"),
        ((("B", 3), "floatt"), r"'floatt' is not a dtype; expected e.g. 'float32'"),
        ("B,30", "expected a shape tuple like"),
    ],
)
def test_bad_specs_name_the_argument_the_value_and_what_is_expected(spec, message):
    with pytest.raises(SpecError, match=message):
        to_onnx(lambda x: x, [spec])


def test_struct_with_none_dim():
    try:
        spec = jax.ShapeDtypeStruct((None, 3), jnp.float32)
    except ValueError:
        pytest.skip("this JAX refuses None in a ShapeDtypeStruct itself")
    with pytest.raises(SpecError, match=r"inputs\[0\] \(x\), dim 0: None is not a dim"):
        to_onnx(lambda x: x, [spec])


@pytest.mark.parametrize("constraint", ["B >>= 2", "B >", "2"])
def test_malformed_constraints(constraint):
    with pytest.raises(SpecError, match=r"constraints\[0\] .* is not a constraint.*'B >= 2'"):
        to_onnx(lambda x: x, [("B", 3)], constraints=[constraint])


def test_a_constraint_string_instead_of_a_sequence():
    with pytest.raises(SpecError, match=r"write \('B >= 2',\)"):
        to_onnx(lambda x: x, [("B", 3)], constraints="B >= 2")


def test_dim_expression_without_its_variable_alone():
    with pytest.raises(
        SpecError, match=r"'B' cannot be read from any input shape.*\('B', \.\.\.\)"
    ):
        to_onnx(lambda x: jnp.zeros(x.shape[0] // 2), [("2*B", 3)])


# -- shape errors raised while tracing ------------------------------------------------------


def test_shapes_that_do_not_fit_the_function_list_the_specs_and_the_users_line():
    def f(x, w):
        return x @ w  # the line the error names

    with pytest.raises(SpecError) as info:
        to_onnx(f, [("B", 30), (20, 4)])
    text = str(info.value)
    assert "dot_general requires contracting dimensions" in text
    assert f"{__file__}:{f.__code__.co_firstlineno + 1} (f)" in text
    assert "  x: float32[B, 30]\n  w: float32[20, 4]" in text
    # no JAX traceback is chained; the JAX error stays reachable
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert isinstance(info.value.jax_error, TypeError)


def test_wrong_number_of_inputs_is_a_spec_error():
    with pytest.raises(
        SpecError, match=r"takes 1 positional argument but 2 were given[\s\S]*input_1: float32\[3\]"
    ):
        to_onnx(lambda x: x, [(3,), (3,)])


def test_undecided_symbolic_comparison_suggests_constraints():
    def f(x):
        return x[:2] if x.shape[0] >= 2 else x

    with pytest.raises(SpecError, match=r"inconclusive[\s\S]*constraints=\(\"B >= 2\",\)"):
        to_onnx(f, [("B",)])
    model = to_onnx(f, [("B",)], constraints=["B >= 2"])
    assert _dims(model.graph.output[0]) == [2]


# -- properties -------------------------------------------------------------------------------

_NAMES = ("B", "T")
_EXPRESSIONS = ("2*B", "B + 1", "T*B")
_DTYPES = ("float32", "int32", "bool", "float64", "int64")


@st.composite
def _valid_leaf(draw):
    """One leaf spec in any of the accepted forms; names used in expressions also appear
    alone (the first leaf of every argument list carries B and T)."""
    rank = draw(st.integers(1, 3))
    dims = tuple(
        draw(
            st.lists(
                st.integers(0, 3) | st.sampled_from(_NAMES + _EXPRESSIONS),
                min_size=rank,
                max_size=rank,
            )
        )
    )
    dtype = draw(st.sampled_from(_DTYPES))
    form = draw(st.sampled_from(["tuple", "pair", "struct"]))
    if form == "tuple":
        return dims
    if form == "pair":
        return (dims, dtype)
    return jax.ShapeDtypeStruct(dims, dtype)


@st.composite
def _valid_specs(draw):
    leaves = draw(st.lists(_valid_leaf(), min_size=1, max_size=3))
    anchor = jax.ShapeDtypeStruct(("B", "T"), jnp.float32)
    shape = draw(st.sampled_from(["flat", "dict", "nested"]))
    if shape == "flat":
        return [anchor, *leaves]
    if shape == "dict":
        return [anchor, {f"k{i}": leaf for i, leaf in enumerate(leaves)}]
    return [[anchor, (leaves[0], {"inner": leaves[1:]})]]


@given(
    specs=_valid_specs(),
    sizes=st.fixed_dictionaries({"B": st.integers(1, 3), "T": st.integers(1, 3)}),
)
def test_valid_specs_export_and_verify(specs, sizes):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 64-bit leaves warn; that is tested above
        assert_exports_match(
            lambda *args: _double(args), specs, sizes={k: [v] for k, v in sizes.items()}
        )


def _is_leaf(x):
    if isinstance(x, jax.ShapeDtypeStruct):
        return True
    scalars = isinstance(x, tuple) and all(isinstance(d, (int, str)) for d in x)
    return scalars or (
        isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], tuple) and isinstance(x[1], str)
    )


_BAD_DIMS = (None, 2.5, "", -1, True, "B >", "B, T", "3x", np.float32(1.0))


@given(specs=_valid_specs(), data=st.data())
def test_invalid_specs_raise_spec_error_only(specs, data):
    """Corrupt one dim (or dtype) of a valid spec list: always a SpecError, never another
    exception type; the same for shapes that do not fit the function."""
    flat, treedef = jax.tree_util.tree_flatten(specs, is_leaf=_is_leaf)
    i = data.draw(st.integers(0, len(flat) - 1))
    leaf = flat[i]
    bad = data.draw(st.sampled_from(_BAD_DIMS + ("dtype",)))
    dims = (
        tuple(leaf.shape)
        if isinstance(leaf, jax.ShapeDtypeStruct)
        else leaf[0]
        if isinstance(leaf[0], tuple)
        else leaf
    )
    dtype = (
        leaf.dtype
        if isinstance(leaf, jax.ShapeDtypeStruct)
        else leaf[1]
        if isinstance(leaf[0], tuple)
        else "float32"
    )
    if bad == "dtype":
        flat[i] = (dims, "no-such-dtype")
    else:
        j = data.draw(st.integers(0, len(dims) - 1))
        flat[i] = (dims[:j] + (bad,) + dims[j + 1 :], dtype) if len(dims) > 0 else ((bad,), dtype)
    corrupted = jax.tree_util.tree_unflatten(treedef, flat)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(SpecError):
            to_onnx(lambda *args: _double(args), corrupted)


@given(n=st.integers(1, 4), k=st.integers(1, 4), m=st.integers(1, 4), named=st.booleans())
def test_shapes_that_do_not_fit_raise_spec_error_only(n, k, m, named):
    x = ("B" if named else n, k)
    w = (m, 2)
    if k == m:
        model = assert_exports_match(
            lambda x, w: x @ w, [x, w], sizes={"B": [2]} if named else None
        )
        assert _dims(model.graph.output[0])[1] == 2
    else:
        with pytest.raises(SpecError, match="input specs:"):
            to_onnx(lambda x, w: x @ w, [x, w])


def test_equal_specs_give_equal_avals_across_exports() -> None:
    """One scope per constraints tuple: a second export's avals equal the first's, so JAX's
    trace caches hit; other constraints get their own scope."""
    from jax2onnx_nn.core.specs import parse_specs

    first = [leaf for _, leaf in parse_specs([("B", 3)]).flat()[0]]
    second = [leaf for _, leaf in parse_specs([("B", 3)]).flat()[0]]
    assert first == second and hash(first[0].shape) == hash(second[0].shape)
    constrained = parse_specs([("B", 3)], constraints=("B >= 2",))
    assert constrained.scope is not parse_specs([("B", 3)]).scope
    assert constrained.scope is parse_specs([("B", 4)], constraints=("B >= 2",)).scope


def test_plain_specs_are_parsed_once_and_scalar_kinds_stay_apart() -> None:
    """Specs of plain values are parsed once per process (a warm export reuses them); 1, 1.0
    and True are equal in Python but different specs."""
    from jax2onnx_nn.core.specs import parse_specs

    assert parse_specs([("B", 3), ((2,), "int32")]) is parse_specs([("B", 3), ((2,), "int32")])
    kinds = [parse_specs([v]).flat()[0][0][1].dtype for v in (1, 1.0, True)]
    assert kinds == [np.dtype("int32"), np.dtype("float32"), np.dtype("bool")]
    assert parse_specs([1.0], enable_double_precision=True).flat()[0][0][1].dtype == np.dtype(
        "float64"
    )
    assert parse_specs([(3,)], arg_names=["x"]) is not parse_specs([(3,)], arg_names=["y"])


def test_narrowing_specs_warn_on_every_export_after_a_silent_parse() -> None:
    """A parse without the warning (verify, layout, the test strategies) of specs that narrow
    float64 must not make a later export of the same specs silent."""
    from jax2onnx_nn.core.specs import parse_specs

    specs = [((3,), "float64")]
    assert parse_specs(specs, warn=False).flat()[0][0][1].dtype == np.dtype("float32")
    for _ in range(2):
        with pytest.warns(UserWarning, match=r"inputs\[0\] float64 -> float32"):
            parse_specs(specs)
    with pytest.warns(UserWarning, match="enable_double_precision"):
        to_onnx(lambda *xs: xs[0] * 2, specs)  # no positional names: the same key as verify's parse
