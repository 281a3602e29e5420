"""The command line: export / inspect / ops / demo, their messages and exit codes."""

import os
import pathlib
import re
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from jax2onnx_nn.__main__ import USAGE, UsageError, main, parse_input, tensor_bytes, verify_runtime
from jax2onnx_nn.core.config import MAX_OPSET, MIN_OPSET

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Registers a lowering globally when imported: only ever imported in a subprocess.
WRONG_MODULE = textwrap.dedent(
    """
    from jax.extend.core import Primitive

    from jax2onnx_nn import lowering

    # a primitive whose lowering is deliberately wrong: computes x + 1 where JAX computes x + 2
    add_two_p = Primitive("add_two_wrong")
    add_two_p.def_impl(lambda x: x + 2)
    add_two_p.def_abstract_eval(lambda x: x)

    @lowering("add_two_wrong", onnx_ops=("Add",))
    def _add_two(ctx, x, **_):
        return ctx.op.Add(x, ctx.const(1.0, like=x))

    def wrong(x):
        return add_two_p.bind(x)
    """
)

USER_MODULE = textwrap.dedent(
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jax2onnx_nn import onnx_function

    W = np.linspace(-1, 1, 120, dtype=np.float32).reshape(30, 4)

    def mlp(x):
        return jnp.tanh(x @ W)

    def make_mlp():
        return mlp

    class Scaler:
        def __init__(self):
            self.scale = np.float32(3.0)

        def __call__(self, x):
            return x * self.scale

    scaler = Scaler()

    def with_callback(x):
        y = jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return y + 1

    @onnx_function
    def block(x):
        return jax.nn.relu(x @ W[:4, :4])

    def two_blocks(x):
        return block(block(x))

    @onnx_function
    def pair(x):
        return block(block(x))

    def nested(x):
        return pair(pair(x))

    def doublings(x):
        # doubles x until its absolute sum passes 100: a while_loop on the data
        return jax.lax.while_loop(lambda c: jnp.abs(c).sum() < 100.0, lambda c: c * 2.0, x)

    def counted_doublings(x):
        # the same, counting the steps: an integer result a bounded loop cannot make NaN
        return jax.lax.while_loop(
            lambda c: jnp.abs(c[0]).sum() < 100.0, lambda c: (c[0] * 2.0, c[1] + 1), (x, 0)
        )
    """
)


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "usermodels.py").write_text(USER_MODULE)
    (tmp_path / "wrongmodels.py").write_text(WRONG_MODULE)
    (tmp_path / "broken_import.py").write_text("VALUE = 1 / 0\n")
    return tmp_path


def _run(workdir, *args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "jax2onnx_nn", *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


# -- export in a subprocess, as users run it ----------------------------------------------------


HIDE_ONNXRUNTIME = textwrap.dedent(
    """
    import sys

    sys.modules["onnxruntime"] = None  # as if it were not installed: importing it fails
    from jax2onnx_nn.__main__ import main

    codes = [main(["export", "usermodels:mlp", "--input", "B,30", "-o", "mlp.onnx", "--verify"]),
             main(["demo", "--out", "out"])]
    print("codes", *codes)
    """
)


def test_without_onnxruntime_verify_and_demo_name_the_extra_and_the_files_written(workdir):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", HIDE_ONNXRUNTIME],
        cwd=workdir,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert "codes 4 4" in result.stdout, result.stdout + result.stderr
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 2 and "Traceback" not in result.stderr, result.stderr
    assert all("pip install 'jax2onnx_nn[onnxruntime]'" in line for line in errors)
    assert (
        errors[0].endswith(f"{workdir / 'mlp.onnx'} was written")
        and (workdir / "mlp.onnx").exists()
    )
    assert errors[1].endswith(f"written so far: {os.path.join('out', 'jax_mlp.onnx')}")


def test_export_and_verify_succeeds(workdir):
    result = _run(
        workdir,
        "export",
        "usermodels:mlp",
        "--input",
        "B,30",
        "-o",
        "mlp.onnx",
        "--verify",
        "--size",
        "B=1,5",
    )
    assert result.returncode == 0, result.stderr
    assert (workdir / "mlp.onnx").exists()
    out = result.stdout
    assert f"wrote {workdir / 'mlp.onnx'}" in out
    assert "inputs:  x: float32[B, 30]" in out
    assert "outputs: out_0: float32[B, 4]" in out
    assert "onnxruntime matches JAX" in out
    assert "[B=1] out_0 float32[1, 4]" in out and "[B=5] out_0 float32[5, 4]" in out


def test_bad_module_is_a_usage_error(workdir):
    result = _run(workdir, "export", "no_such_module_xyz:f", "--input", "3", "-o", "m.onnx")
    assert result.returncode == USAGE
    assert "cannot import 'no_such_module_xyz'" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_attribute_lists_what_is_there(workdir):
    result = _run(workdir, "export", "usermodels:mpl", "--input", "B,30", "-o", "m.onnx")
    assert result.returncode == USAGE
    assert "'usermodels' has no attribute 'mpl'" in result.stderr
    assert "mlp" in result.stderr and "make_mlp" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_input_spec_says_what_is_expected(workdir):
    result = _run(workdir, "export", "usermodels:mlp", "--input", "B,3x", "-o", "m.onnx")
    assert result.returncode == USAGE
    assert "--input 'B,3x': '3x' is not a dim" in result.stderr
    assert "--input B,30" in result.stderr
    assert not (workdir / "m.onnx").exists()


def test_unsupported_primitive_lists_it_without_a_traceback(workdir):
    result = _run(workdir, "export", "usermodels:with_callback", "--input", "B,30", "-o", "cb.onnx")
    assert result.returncode == 3
    assert "pure_callback (used 1x)" in result.stderr
    assert "usermodels.py:" in result.stderr  # the user's source line
    assert "Traceback" not in result.stderr
    assert not (workdir / "cb.onnx").exists()
    debug = _run(
        workdir, "export", "usermodels:with_callback", "--input", "B,30", "-o", "cb.onnx", "--debug"
    )
    assert debug.returncode != 0
    assert "Traceback" in debug.stderr and "ConversionError" in debug.stderr


def test_wrong_lowering_fails_verification_with_exit_1(workdir):
    result = _run(
        workdir, "export", "wrongmodels:wrong", "--input", "2,3", "-o", "wrong.onnx", "--verify"
    )
    assert result.returncode == 1
    assert "onnxruntime and JAX disagree" in result.stdout
    assert "6 of 6 elements differ" in result.stdout


# -- in-process: targets, options, inspect, ops -----------------------------------------------


def _main(workdir, monkeypatch, *args):
    monkeypatch.chdir(workdir)
    monkeypatch.syspath_prepend(str(workdir))
    return main(list(args))


@pytest.mark.parametrize(
    "target", ["usermodels:make_mlp", "usermodels:Scaler", "usermodels:scaler", "usermodels.py:mlp"]
)
def test_targets_functions_factories_classes_instances(workdir, monkeypatch, capsys, target):
    spec = "B,30" if "mlp" in target else "B,4"
    assert (
        _main(workdir, monkeypatch, "export", target, "--input", spec, "-o", "t.onnx", "--verify")
        == 0
    )
    assert "onnxruntime matches JAX" in capsys.readouterr().out


def test_import_error_inside_the_module_is_reported(workdir, monkeypatch, capsys):
    assert (
        _main(workdir, monkeypatch, "export", "broken_import:f", "--input", "3", "-o", "m.onnx")
        == USAGE
    )
    assert "importing 'broken_import' failed: ZeroDivisionError" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--opset", "12"], f"--opset 12: supported opsets are {MIN_OPSET} ... {MAX_OPSET}"),
        (["--size", "B=0"], "--size 'B=0': expected NAME=N"),
        (["--input", "B,30:floaty"], "'floaty' is not a dtype"),
        (["--loop-bound", "0"], "--loop-bound 0: give the most steps"),
    ],
)
def test_bad_options_are_usage_errors(workdir, monkeypatch, capsys, args, message):
    assert _main(workdir, monkeypatch, "export", "usermodels:mlp", "-o", "m.onnx", *args) == USAGE
    assert message in capsys.readouterr().err


def test_loop_bound_writes_a_data_dependent_while_loop_for_tract(workdir, monkeypatch, capsys):
    # without it, tract's profile refuses the Loop and says which option to use
    assert (
        _main(
            workdir,
            monkeypatch,
            "export",
            "usermodels:doublings",
            "--input",
            "4",
            "-o",
            "w.onnx",
            "--target",
            "tract",
        )
        == 3
    )
    assert "--loop-bound N" in capsys.readouterr().err
    assert (
        _main(
            workdir,
            monkeypatch,
            "export",
            "usermodels:doublings",
            "--input",
            "4",
            "-o",
            "w.onnx",
            "--target",
            "tract",
            "--loop-bound",
            "64",
            "--verify",
        )
        == 0
    )
    assert f"{verify_runtime('tract')[0]} matches JAX" in capsys.readouterr().out
    ops = {n.op_type for n in onnx.load(workdir / "w.onnx").graph.node}
    assert "Scan" in ops and "Loop" not in ops


@pytest.mark.parametrize("target", ["tract", "openvino", "onnxruntime-web"])
def test_verify_runs_in_the_targets_runtime_and_says_which(workdir, monkeypatch, capsys, target):
    """Where the target's runtime is installed --verify runs there (it ran onnxruntime
    whatever the target); else onnxruntime, with a note that says why."""
    from jax2onnx_nn.core.runtimes import missing_reason

    code = _main(
        workdir,
        monkeypatch,
        "export",
        "usermodels:mlp",
        "--input",
        "B,30",
        "-o",
        "m.onnx",
        "--target",
        target,
        "--verify",
    )
    out = capsys.readouterr().out
    assert code == 0, out
    reason = missing_reason(target)
    if reason is None:
        assert f"{target} matches JAX (mlp, opset" in out and "note:" not in out
    else:
        assert f"note: --verify runs the model in onnxruntime, not {target}: {reason}" in out
        assert "onnxruntime matches JAX" in out


def test_verify_falls_back_to_onnxruntime_with_a_note(monkeypatch):
    import jax2onnx_nn.core.runtimes as runtimes

    assert verify_runtime(None) == verify_runtime("onnxruntime") == ("onnxruntime", "")
    runtime, note = verify_runtime("tensorrt")
    assert runtime == "onnxruntime"
    assert note.startswith(
        "note: --verify runs the model in onnxruntime: tensorrt has no runtime here"
    )
    monkeypatch.setattr(
        runtimes, "missing_reason", lambda r: f"{r} is not installed (pip install {r})"
    )
    note = (
        "note: --verify runs the model in onnxruntime, not tract: tract is not installed "
        "(pip install tract)"
    )
    assert verify_runtime("tract") == ("onnxruntime", note)


def test_verify_of_an_nchw_export_and_a_misspelled_size(workdir, monkeypatch, capsys):
    assert (
        _main(
            workdir,
            monkeypatch,
            "export",
            "usermodels:scaler",
            "--input",
            "B,4,5,3",
            "-o",
            "n.onnx",
            "--inputs-as-nchw",
            "0",
            "--outputs-as-nchw",
            "0",
            "--verify",
        )
        == 0
    )
    assert "onnxruntime matches JAX" in capsys.readouterr().out
    assert (
        _main(
            workdir,
            monkeypatch,
            "export",
            "usermodels:scaler",
            "--input",
            "B,4",
            "-o",
            "s.onnx",
            "--verify",
            "--size",
            "b=2",
        )
        == USAGE
    )
    message = (
        "--size: sizes: 'b' is not a symbolic dim of the inputs (their dims: B); did you mean 'B'?"
    )
    assert message in capsys.readouterr().err
    assert not (workdir / "s.onnx").exists()  # found before the export


def test_source_lines_are_relative_or_left_out(workdir, monkeypatch):
    assert (
        _main(workdir, monkeypatch, "export", "usermodels:mlp", "--input", "B,30", "-o", "m.onnx")
        == 0
    )
    docs = [n.doc_string for n in onnx.load(workdir / "m.onnx").graph.node]
    assert docs and all(doc.startswith("usermodels.py:") for doc in docs), docs  # below the cwd
    assert (
        _main(
            workdir,
            monkeypatch,
            "export",
            "usermodels:mlp",
            "--input",
            "B,30",
            "-o",
            "m.onnx",
            "--no-source-locations",
        )
        == 0
    )
    assert not any(n.doc_string for n in onnx.load(workdir / "m.onnx").graph.node)


def test_warnings_are_one_line_of_the_command(workdir, monkeypatch, capsys):
    # a bounded loop's integer results cannot be poisoned: the export warns, naming the user's
    # line in the text, as the command's own line (Python's location would be <frozen runpy>)
    assert (
        _main(
            workdir,
            monkeypatch,
            "export",
            "usermodels:counted_doublings",
            "--input",
            "4",
            "-o",
            "w.onnx",
            "--target",
            "tract",
            "--loop-bound",
            "64",
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "jax2onnx-nn: warning: the integer or bool results of the while_loop at " in err
    assert "usermodels.py:" in err and "runpy" not in err and "UserWarning" not in err


def test_functions_option_and_inspect_counts_calls(workdir, monkeypatch, capsys):
    assert (
        _main(
            workdir,
            monkeypatch,
            "export",
            "usermodels:two_blocks",
            "--input",
            "B,4",
            "-o",
            "f.onnx",
            "--functions",
        )
        == 0
    )
    capsys.readouterr()
    assert _main(workdir, monkeypatch, "inspect", "f.onnx") == 0
    out = capsys.readouterr().out
    assert "f.onnx: two_blocks, produced by jax2onnx_nn" in out
    assert "functions: 1" in out
    assert "jax2onnx_nn.block: called 2x" in out
    assert "inputs:  x: float32[B, 4]" in out
    assert "opset:   ai.onnx=21" in out


def test_inspect_counts_calls_of_nested_functions(workdir, monkeypatch, capsys):
    assert (
        _main(workdir, monkeypatch, "export", "usermodels:nested", "--input", "B,4", "-o", "n.onnx")
        == 0
    )
    capsys.readouterr()
    assert _main(workdir, monkeypatch, "inspect", "n.onnx") == 0
    out = capsys.readouterr().out
    assert "functions: 2" in out
    assert "jax2onnx_nn.pair: called 2x, 2 nodes (block 2)" in out
    # the body is MatMul + relu: 2 nodes when the Flax adapter (imported by other tests in this
    # process) maps jax.nn.relu to Relu, 3 when relu is lowered from lax; the count is the point
    assert re.search(r"jax2onnx_nn\.block: called 4x \(2 call nodes\), [23] nodes", out)


def test_inspect_counts_initializer_bytes_of_every_storage(tmp_path, monkeypatch, capsys):
    big = np.arange(1000, dtype=np.float32).reshape(10, 100)
    raw = numpy_helper.from_array(np.ones((4, 4), np.float64), "raw")  # raw_data: 128 B
    typed = helper.make_tensor("typed", onnx.TensorProto.INT64, [3], [1, 2, 3])  # int64_data: 24 B
    int4 = helper.make_tensor("int4", onnx.TensorProto.INT4, [5], [1, 2, 3, 4, 5])  # packed: 3 B
    ext = numpy_helper.from_array(big, "ext")  # 4000 B, moved to external data
    out = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [10, 100])
    graph = helper.make_graph(
        [helper.make_node("Identity", ["ext"], ["y"])], "g", [], [out], [raw, typed, int4, ext]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    path = tmp_path / "ext.onnx"
    onnx.save(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="ext.data",
        size_threshold=1000,
    )
    assert tensor_bytes(typed) == (24, False)
    assert tensor_bytes(int4) == (3, False)
    assert tensor_bytes(raw) == (128, False)
    monkeypatch.chdir(tmp_path)
    assert main(["inspect", "ext.onnx"]) == 0
    text = capsys.readouterr().out
    assert "weights: 4 initializers, 4.16 kB, 4.00 kB in external data" in text  # 4000+128+24+3


def test_inspect_of_a_missing_or_invalid_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "junk.onnx").write_bytes(b"\x00not a model")
    assert main(["inspect", "missing.onnx"]) == USAGE
    assert main(["inspect", "junk.onnx"]) == USAGE
    err = capsys.readouterr().err
    assert "missing.onnx: no such file" in err and "junk.onnx is not an ONNX model" in err


def test_ops_prints_the_support_table(tmp_path):
    # a subprocess: this test session's registry also holds rules that tests registered
    result = _run(tmp_path, "ops", "dot_")
    assert result.returncode == 0
    assert (
        "dot_general" in result.stdout
        and "MatMul" in result.stdout
        and "reduce_sum" not in result.stdout
    )
    modules = _run(tmp_path, "ops", "Linear").stdout
    assert "nnx.Linear" in modules and "eqx.nn.Linear" in modules and "Gemm" in modules
    table = _run(tmp_path, "ops", "--markdown").stdout.strip()
    assert table in (ROOT / "docs" / "support.md").read_text()  # the docs' table is this output


def test_ops_matches_any_case_modules_too_and_says_what_is_not_supported(capsys):
    assert main(["ops", "conv"]) == 0
    out = capsys.readouterr().out
    assert all(
        name in out
        for name in ("conv_general_dilated", "nnx.Conv ", "nnx.ConvTranspose", "eqx.nn.Conv2d")
    )
    assert main(["ops", "no_such_op"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "'no_such_op' is not supported" in captured.err


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("B,30", ("B", 30)),
        ("B,T:int32", (("B", "T"), "int32")),
        (":bool", ((), "bool")),
        ("2*B, 3", ("2*B", 3)),
        ("", ()),
    ],
)
def test_parse_input(text, spec):
    assert parse_input(text) == spec


@pytest.mark.parametrize("text", ["B,-3", "B,,3:int32x", "B;3"])
def test_parse_input_rejects(text):
    with pytest.raises(UsageError, match="--input"):
        parse_input(text)


def test_demo_prints_where_the_files_are_and_a_summary(tmp_path):
    result = _run(tmp_path, "demo", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert f"files in {tmp_path / 'out'}" in out
    assert "all models verified" in out
    assert "jax_mlp" in out and "inputs:  x: float32[B, 30]" in out
    # which sizes were verified, with which tolerance; the toy GPT is called what it is
    assert "verified vs JAX in onnxruntime at B=1, B=7, B=128" in out
    assert "(tolerance float32 rtol 1e-05, atol 1e-05)" in out
    assert "verified vs JAX in onnxruntime at B=1 T=8, B=2 T=32" in out
    assert "a toy GPT: GPT-2's architecture at 2 layers" in out and "gpt2_small" not in out
    assert (tmp_path / "out" / "jax_mlp.onnx").exists()
    assert len(out.splitlines()) < 60  # one screen


@pytest.mark.parametrize("existing", [True, False])
def test_ctrl_c_is_one_line_and_exit_130(workdir, monkeypatch, capsys, existing):
    """Ctrl-C while exporting: one line saying what became of the file, exit 130 (128 +
    SIGINT), no traceback; a file that was there is left as it was (written atomically)."""
    import jax2onnx_nn

    if existing:
        (workdir / "m.onnx").write_bytes(b"old model")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(jax2onnx_nn, "to_onnx", interrupted)
    assert (
        _main(workdir, monkeypatch, "export", "usermodels:mlp", "--input", "B,30", "-o", "m.onnx")
        == 130
    )
    err = capsys.readouterr().err
    state = "left unchanged" if existing else "not written"
    assert err == f"jax2onnx-nn: interrupted; m.onnx was {state}\n"
    assert (workdir / "m.onnx").exists() == existing


def test_misspelled_flag_names_the_closest_one(workdir, monkeypatch, capsys):
    assert (
        _main(
            workdir,
            monkeypatch,
            "export",
            "usermodels:mlp",
            "--input",
            "B,30",
            "-o",
            "m.onnx",
            "--opsett",
            "18",
        )
        == USAGE
    )
    err = capsys.readouterr().err
    assert "unrecognized arguments: --opsett 18" in err and "--opsett: did you mean --opset?" in err
    assert "python -m jax2onnx_nn export --help" in err and "Traceback" not in err
