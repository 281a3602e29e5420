"""One export configuration: validated once, the same options for to_onnx, export_model and
the config object, and documented from one place."""

import dataclasses
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax2onnx_nn import export_model, to_onnx
from jax2onnx_nn.core.config import DEFAULT_OPSET, MAX_OPSET, MIN_OPSET, ExportConfig, option_names
from jax2onnx_nn.testing import assert_exports_match


@pytest.mark.parametrize("opset", [MIN_OPSET - 1, MAX_OPSET + 1])
def test_opset_out_of_range_is_refused_by_the_config(opset):
    with pytest.raises(ValueError, match=f"between {MIN_OPSET} and {MAX_OPSET}"):
        ExportConfig(opset=opset)
    with pytest.raises(ValueError, match=f"between {MIN_OPSET} and {MAX_OPSET}"):
        ExportConfig().replace(opset=opset)


def test_defaults_and_normalisation():
    config = ExportConfig(opset=None, constraints=["B >= 2"], input_names=["a"], lowerings={jax.lax.tanh_p: lambda ctx, x, **p: x})
    assert config.opset == DEFAULT_OPSET
    assert config.constraints == ("B >= 2",) and config.input_names == ("a",)
    assert set(config.lowerings) == {"tanh"}
    assert dataclasses.replace(config).lowerings["tanh"].rule is config.lowerings["tanh"].rule


def test_unknown_option_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="opsett"):
        to_onnx(jnp.sin, [(3,)], opsett=18)


def test_every_option_is_in_the_signature_and_the_docstring():
    for fn in (to_onnx, export_model):
        params = inspect.signature(fn).parameters
        assert all(name in params for name in option_names())
    assert all(f"        {name}: " in to_onnx.__doc__ for name in option_names())


def test_a_config_object_and_keywords_export_the_same_model():
    fn = lambda x: jnp.tanh(x) * 2.0  # noqa: E731
    config = ExportConfig(opset=18, model_name="net")
    by_config = to_onnx(fn, [(3,)], config)
    by_keywords = to_onnx(fn, [(3,)], opset=18, model_name="net")
    assert by_config.SerializeToString() == by_keywords.SerializeToString()
    assert by_config.opset_import[0].version == 18 and by_config.graph.name == "net"
    changed = to_onnx(fn, [(3,)], config, opset=19)  # keywords change the config
    assert changed.opset_import[0].version == 19 and changed.graph.name == "net"


def test_coarse_op_below_its_min_opset_lowers_its_body():
    """One min_opset enforcer (the interpreter) for rules and coarse ops: jax.nn.gelu is one
    Gelu from opset 20, its body (tanh approximation) below."""
    fn = jax.nn.gelu
    new = assert_exports_match(fn, [((4,), np.float32)], opset=20)
    old = assert_exports_match(fn, [((4,), np.float32)], opset=19)
    assert "Gelu" in {n.op_type for n in new.graph.node}
    assert "Gelu" not in {n.op_type for n in old.graph.node}
