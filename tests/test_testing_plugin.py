"""The pytest plugin (fixtures) and hypothesis strategies users test their own exports with."""

import importlib.metadata
import os
import pathlib
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.specs import parse_specs
from jax2onnx_nn.testing import strategies as j2o

pytest_plugins = ["pytester"]

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _installed() -> bool:
    return any(ep.name == "jax2onnx_nn" for ep in importlib.metadata.entry_points(group="pytest11"))


# Without the installed entry point (a checkout used in place), load the plugin by name.
PLUGIN_ARGS = [] if _installed() else ["-p", "jax2onnx_nn.testing.plugin"]

USER_TESTS = textwrap.dedent(
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    from hypothesis import given, settings, strategies as st

    from jax2onnx_nn.testing import strategies as j2o

    W = np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2)

    def mlp(x):
        return jnp.tanh(x @ W)

    def test_one_line(assert_onnx_matches):
        model = assert_onnx_matches(mlp, [("B", 3)], sizes={"B": [1, 4]})
        assert [n.op_type for n in model.graph.node] == ["MatMul", "Tanh"]

    def test_roundtrip_gives_model_and_report(onnx_roundtrip):
        result = onnx_roundtrip(mlp, [("B", 3)], sizes={"B": [2, 5]})
        assert result.ok
        assert [run.sizes for run in result.report.runs] == [{"B": 2}, {"B": 5}]
        assert result.model.graph.input[0].name == "x"

    def test_roundtrip_of_a_wrong_rule_does_not_fail_by_itself(onnx_roundtrip):
        wrong_sin = lambda ctx, x, **_: ctx.op.Cos(x)
        result = onnx_roundtrip(jnp.sin, [(4,)], lowerings={"sin": wrong_sin})
        assert not result.ok and "MISMATCH" in str(result)

    @settings(max_examples=5, deadline=None)
    @given(data=st.data(), specs=j2o.input_specs(num_inputs=2, same_shape=True, max_dims=3))
    def test_property_with_strategies(data, specs, assert_onnx_matches):
        sizes = data.draw(j2o.sizes_for(specs))
        values = data.draw(j2o.inputs_for(specs, sizes, elements=st.floats(-10, 10, width=32)))
        assert_onnx_matches(lambda a, b: a * b + 1.0, specs, input_values=values)
    """
)

WRONG_LOWERING = textwrap.dedent(
    """
    import jax.numpy as jnp

    def wrong_exp(ctx, x, **_):
        return ctx.op.Add(x, ctx.const(1.0, like=x))  # exp(x) is not 1 + x

    def test_wrong_exp(assert_onnx_matches):
        assert_onnx_matches(
            lambda x: jnp.exp(x) * 2.0, [("B", 3)], sizes={"B": [2]}, lowerings={"exp": wrong_exp}
        )
    """
)


def test_user_tests_with_the_fixtures_pass(pytester):
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", *PLUGIN_ARGS)
    result.assert_outcomes(passed=4)


def test_a_wrong_lowering_fails_with_a_readable_diff(pytester):
    pytester.makepyfile(test_wrong=WRONG_LOWERING)
    result = pytester.runpytest("-p", "no:cacheprovider", *PLUGIN_ARGS)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*onnxruntime and JAX disagree (main, opset 21):*",
            "*[[]B=2[]] out_0 float32[[]2, 3[]]: max abs * MISMATCH*",
            "*out_0 [[]B=2[]]: 6 of 6 elements differ (rtol=1e-05, atol=1e-05); the 5 largest:*",
            "*index*onnxruntime*JAX*abs diff*",
            "*model saved to *test_wrong_exp.onnx*",
        ]
    )
    out = result.stdout.str()
    assert "Traceback" not in out and "def test_wrong_exp" not in out  # the diff, not a trace
    saved = out.split("model saved to ", 1)[1].split()[0]
    assert pathlib.Path(saved).exists()


def test_save_dir_option_keeps_every_model(pytester, tmp_path):
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        *PLUGIN_ARGS,
        "--onnx-save-dir",
        str(tmp_path / "models"),
        "-k",
        "one_line or gives_model",
    )
    result.assert_outcomes(passed=2)
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == [
        "test_one_line.onnx",
        "test_roundtrip_gives_model_and_report.onnx",
    ]


def test_modules_are_compared_in_inference_mode(pytester):
    pytest.importorskip("flax")
    pytester.makepyfile(
        test_flax=textwrap.dedent(
            """
        from flax import nnx

        class Net(nnx.Module):
            def __init__(self, rngs):
                self.linear = nnx.Linear(4, 3, rngs=rngs)
                self.dropout = nnx.Dropout(0.5, rngs=rngs)

            def __call__(self, x):
                return self.dropout(self.linear(x))

        def test_net(assert_onnx_matches):
            net = Net(nnx.Rngs(0))  # in training mode: Dropout is active in JAX
            model = assert_onnx_matches(net, [("B", 4)], sizes={"B": [1, 3]})
            assert [n.op_type for n in model.graph.node] == ["Gemm"]

        def test_batch_statistics_in_training_mode(assert_onnx_matches):
            net = nnx.BatchNorm(4, rngs=nnx.Rngs(0))
            model = assert_onnx_matches(net, [(5, 4)], training=True)
            assert "BatchNormalization" not in [n.op_type for n in model.graph.node]
        """
        )
    )
    pytester.runpytest("-p", "no:cacheprovider", *PLUGIN_ARGS).assert_outcomes(passed=2)


def test_equinox_modules_are_compared_in_inference_mode(pytester):
    pytest.importorskip("equinox")
    pytester.makepyfile(
        test_eqx=textwrap.dedent(
            """
        import equinox as eqx
        import jax

        class Net(eqx.Module):
            linear: eqx.nn.Linear
            dropout: eqx.nn.Dropout

            def __init__(self, key):
                self.linear = eqx.nn.Linear(4, 3, key=key)
                self.dropout = eqx.nn.Dropout(0.5)  # active in JAX unless in inference mode

            def __call__(self, x):
                return self.dropout(jax.vmap(self.linear)(x), key=jax.random.key(0))

        def test_net(assert_onnx_matches):
            model = assert_onnx_matches(Net(jax.random.key(1)), [("B", 4)], sizes={"B": [1, 3]})
            assert [n.op_type for n in model.graph.node] == ["Gemm"]
        """
        )
    )
    pytester.runpytest("-p", "no:cacheprovider", *PLUGIN_ARGS).assert_outcomes(passed=1)


def test_the_plugin_works_without_hypothesis(tmp_path):
    (tmp_path / "test_plain.py").write_text(
        textwrap.dedent(
            """
        import jax.numpy as jnp
        import pytest

        def test_plain(assert_onnx_matches):
            assert_onnx_matches(jnp.cos, [(3,)])

        def test_strategies_say_what_is_missing():
            with pytest.raises(ImportError, match="needs hypothesis"):
                import jax2onnx_nn.testing.strategies  # noqa: F401
        """
        )
    )
    # a package that shadows hypothesis and fails to import, as if it were not installed
    (tmp_path / "shadow" / "hypothesis").mkdir(parents=True)
    (tmp_path / "shadow" / "hypothesis" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'hypothesis'\", name='hypothesis')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "shadow"), str(ROOT)])}
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:hypothesispytest",
        *PLUGIN_ARGS,
        "test_plain.py",
    ]
    result = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


def test_entry_point_is_declared():
    assert (
        '[project.entry-points.pytest11]\njax2onnx_nn = "jax2onnx_nn.testing.plugin"'
        in (ROOT / "pyproject.toml").read_text()
    )
    if _installed():
        (ep,) = [
            ep
            for ep in importlib.metadata.entry_points(group="pytest11")
            if ep.name == "jax2onnx_nn"
        ]
        assert ep.value == "jax2onnx_nn.testing.plugin"


# -- the strategies themselves ------------------------------------------------------------------


@given(
    specs=j2o.input_specs(
        num_inputs=st.integers(1, 3), max_dims=3, max_side=4, dtypes=("float32", "int8", "bool")
    )
)
def test_input_specs_are_valid_specs(specs):
    assert 1 <= len(specs) <= 3
    parsed = parse_specs(specs)
    for spec, leaf in zip(specs, parsed.args, strict=True):
        shape, dtype = spec if len(spec) == 2 and isinstance(spec[0], tuple) else (spec, "float32")
        assert np.dtype(leaf.dtype) == np.dtype(dtype)
        assert len(leaf.shape) == len(shape) <= 3
        assert all(d in ("B", "T") or 0 <= d <= 4 for d in shape)


@given(
    data=st.data(),
    specs=j2o.input_specs(num_inputs=2, dim_names=("N",), min_dims=1, dtypes=("float32", "int32")),
)
def test_arrays_for_match_their_spec_and_sizes(data, specs):
    sizes = data.draw(j2o.sizes_for(specs))
    assert set(sizes) == set(j2o.dim_names_of(specs))
    for spec, leaf in zip(specs, parse_specs(specs).args, strict=True):
        array = data.draw(j2o.arrays_for(spec, sizes))
        assert array.dtype == np.dtype(leaf.dtype)
        assert array.shape == tuple(jxi.evaluate_dim(d, sizes, 3) for d in leaf.shape)
        if array.dtype.kind == "f":
            assert np.isfinite(array).all()


@given(data=st.data())
def test_dim_expressions_and_elementwise_export(data, assert_onnx_matches):
    specs = [("B", 2), ("2*B", 2)]
    sizes = data.draw(j2o.sizes_for(specs, max_size=3))
    values = data.draw(j2o.inputs_for(specs, sizes, elements=st.floats(-100, 100, width=32)))
    assert values[1].shape == (2 * sizes["B"], 2)
    assert_onnx_matches(lambda x, y: jnp.concatenate([x, x]) - y, specs, input_values=values)
