"""Value names unique across a graph and its bodies (SSA, as onnxruntime requires)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxruntime as ort

from jax2onnx_nn.core.passes.unique_names import unique_value_names


def _cast(value: ir.Value, to: ir.DataType) -> ir.Node:
    return ir.Node("", "Cast", [value], [ir.AttrInt64("to", int(to))], num_outputs=1)


def _model_with_a_name_in_a_branch_and_outside() -> ir.Model:
    """y = If(c, then: Cast(x), else: Cast(z)) + Cast(x), the Cast of the main graph added
    before the If: casts added without names, as a pass adds them, are named ``val_0`` by
    onnx-ir in each graph, so the then-branch redefines a name of its enclosing scope."""
    f32, f16 = ir.DataType.FLOAT, ir.DataType.FLOAT16
    x = ir.Value(name="x", type=ir.TensorType(f32), shape=ir.Shape([3]))
    z = ir.Value(name="z", type=ir.TensorType(f32), shape=ir.Shape([3]))
    c = ir.Value(name="c", type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([]))
    graph = ir.Graph([x, z, c], [], nodes=[], name="main", opset_imports={"": 21})
    outer = _cast(x, f16)
    graph.append(outer)
    branches = []
    for source in (x, z):
        body = ir.Graph([], [], nodes=[], name=f"branch_{source.name}")
        cast = _cast(source, f16)
        body.append(cast)
        cast.outputs[0].dtype = f16
        body.outputs.append(cast.outputs[0])
        branches.append(body)
    branch = ir.Node(
        "",
        "If",
        [c],
        [ir.AttrGraph("then_branch", branches[0]), ir.AttrGraph("else_branch", branches[1])],
        num_outputs=1,
    )
    graph.append(branch)
    total = ir.Node("", "Add", [branch.outputs[0], outer.outputs[0]], num_outputs=1)
    graph.append(total)
    total.outputs[0].name = "y"
    graph.outputs.append(total.outputs[0])
    return ir.Model(graph, ir_version=10)


def test_a_name_defined_in_a_branch_and_outside_is_renamed():
    model = _model_with_a_name_in_a_branch_and_outside()
    names = [model.graph.node(1).attributes["then_branch"].value.outputs[0].name]
    assert names[0] in {v.name for n in model.graph for v in n.outputs}  # the clash
    proto = ir.to_proto(model)
    try:  # before: onnxruntime refuses it ("single static assignment")
        ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        refused = False
    except Exception as err:
        refused = "static assignment" in str(err)
    assert refused
    assert unique_value_names(model) == 2  # the then and else branches' casts
    session = ort.InferenceSession(
        ir.to_proto(model).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    x = np.array([1.0, -2.5, 3.0], np.float32)
    for c, want in ((True, 2 * x), (False, 0 * x)):
        (got,) = session.run(None, {"x": x, "z": -x, "c": np.array(c)})
        np.testing.assert_array_equal(got, want.astype(np.float16))
    assert [v.name for v in model.graph.inputs] == ["x", "z", "c"]


def test_unique_names_are_left_alone():
    model = _model_with_a_name_in_a_branch_and_outside()
    unique_value_names(model)
    before = ir.to_proto(model).SerializeToString()
    assert unique_value_names(model) == 0
    assert ir.to_proto(model).SerializeToString() == before
