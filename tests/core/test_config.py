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
    config = ExportConfig(
        opset=None,
        constraints=["B >= 2"],
        input_names=["a"],
        lowerings={jax.lax.tanh_p: lambda ctx, x, **p: x},
    )
    assert config.opset == DEFAULT_OPSET
    assert config.constraints == ("B >= 2",) and config.input_names == ("a",)
    assert set(config.lowerings) == {"tanh"}
    assert dataclasses.replace(config).lowerings["tanh"].rule is config.lowerings["tanh"].rule


def _entry_points():
    """Every public entry point that takes options (the adapters' where their framework is
    installed), called with the keywords given."""
    import importlib.util

    from jax2onnx_nn import verify
    from jax2onnx_nn.testing import assert_exports_match_on

    model = to_onnx(jnp.sin, [(3,)])
    calls = {
        "to_onnx": lambda **kw: to_onnx(jnp.sin, [(3,)], **kw),
        "export_model": lambda **kw: export_model(jnp.sin, [(3,)], **kw),
        "verify": lambda **kw: verify(jnp.sin, model, [(3,)], **kw),
        "assert_exports_match": lambda **kw: assert_exports_match(jnp.sin, [(3,)], **kw),
        "assert_exports_match_on": lambda **kw: assert_exports_match_on(
            jnp.sin, np.ones(3, np.float32), **kw
        ),
    }
    if importlib.util.find_spec("flax") is not None:
        from flax import nnx

        from jax2onnx_nn import flax as j_flax

        class Doubling(nnx.Module, j_flax.OnnxExportable):
            def __call__(self, x):
                return 2 * x

        calls["export_onnx (flax)"] = lambda **kw: j_flax.export_onnx(Doubling(), [(3,)], **kw)
        calls["export_onnx (flax mixin)"] = lambda **kw: Doubling().export_onnx([(3,)], **kw)
    if importlib.util.find_spec("equinox") is not None:
        import equinox as eqx

        from jax2onnx_nn import equinox as j_eqx

        class EqxDoubling(eqx.Module, j_eqx.OnnxExportable):
            def __call__(self, x):
                return 2 * x

        calls["export_onnx (equinox)"] = lambda **kw: j_eqx.export_onnx(EqxDoubling(), [(3,)], **kw)
        calls["export_onnx (equinox mixin)"] = lambda **kw: EqxDoubling().export_onnx([(3,)], **kw)
    return calls


@pytest.mark.parametrize(
    ("misspelled", "meant"), [("opsett", "opset"), ("size", "sizes"), ("constraint", "constraints")]
)
def test_a_misspelled_option_names_the_closest_one_at_every_entry_point(misspelled, meant):
    """A keyword no entry point takes: the error names it, the closest accepted keyword (where
    that entry point takes it) and where the options are documented, never an internal class
    (before: ``ExportConfig.__init__() got an unexpected keyword argument 'opsett'``)."""
    from jax2onnx_nn.core.config import UnknownOptionError

    for entry, call in _entry_points().items():
        with pytest.raises(UnknownOptionError) as info:
            call(**{misspelled: 18})
        text = str(info.value)
        assert isinstance(info.value, TypeError) and "ExportConfig" not in text, text
        assert text.startswith(f"{entry.split()[0]}() got an unknown option {misspelled!r}"), text
        takes_meant = (
            entry.startswith(("verify", "assert")) if meant == "sizes" else entry != "verify"
        )
        assert (f"did you mean {meant!r}?" in text) == takes_meant, text
        if entry != "verify":
            assert (
                "the export options (each documented in help(jax2onnx_nn.to_onnx)): input_params"
                in text
            ), text


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
