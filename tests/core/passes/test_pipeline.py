"""The pipeline: the op census and the order of the passes."""

from __future__ import annotations

import jax.numpy as jnp


def test_the_op_census_sees_bodies_and_skips_passes_without_their_ops():
    """op_census holds the op types of loop bodies too; run_if_present walks nothing for a
    pass whose declared op types are absent, runs it otherwise, and adds what it creates."""
    import jax

    from jax2onnx_nn.core.api import export_model
    from jax2onnx_nn.core.ir.census import op_census, rewrite, run_if_present

    model = export_model(
        lambda x: jax.lax.fori_loop(0, 3, lambda i, u: jnp.sin(u) * 2.0, x), [(4,)]
    )
    census = op_census(model)
    assert {"Scan", "Sin", "Mul"} <= census and "Transpose" not in census, census
    calls = []

    @rewrite("Transpose", creates={"Reshape"})
    def on_transposes(m):
        calls.append("transposes")

    @rewrite("Sin", "Transpose", creates={"Gather"})
    def on_sines(m):
        calls.append("sines")
        return 1

    assert run_if_present(on_transposes, model, census) is None and "Reshape" not in census
    assert run_if_present(on_sines, model, census) == 1 and "Gather" in census
    assert calls == ["sines"]


def _stated_order(level: str) -> list[str]:
    """The pass names ARCHITECTURE.md's data path (step 5) lists at one indentation: the
    first backquoted name of each numbered item ``level`` spaces in."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).resolve().parents[3] / "ARCHITECTURE.md").read_text()
    start = text.index("5. The `ir.Model` gets the ONNX functions")
    step = text[start : text.index("Then `api._check_target_ops`")]
    return re.findall(rf"^{level}\d+\. `(\w+)`", step, flags=re.M)


def test_architecture_states_the_pipeline_in_its_order():
    """ARCHITECTURE.md's data path names the stages of passes.PIPELINE and the passes of
    passes.CLEANUP in the order the code runs them."""
    from jax2onnx_nn.core.passes import CLEANUP, PIPELINE

    assert _stated_order("   ") == [stage.name for stage in PIPELINE]
    assert _stated_order("      ") == [step.run.__name__ for step in CLEANUP]
