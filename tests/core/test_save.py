"""Writing models: path checks, permissions, one file or external data, memory per mode."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest

from jax2onnx_nn import export_model, onnx_function, to_onnx
from jax2onnx_nn.core import save
from jax2onnx_nn.core.api import save_model

W = np.asarray(
    jax.random.normal(jax.random.key(0), (64, 48)), np.float32
)  # 12 kB: written on its own
B = np.linspace(-1.0, 1.0, 48, dtype=np.float32)


def _mlp(x):
    return jnp.tanh(x @ W + B) @ W.T


def _check_runs_like_jax(path, fn=_mlp, shape=(3, 64)):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    session = ort.InferenceSession(
        path, providers=["CPUExecutionProvider"]
    )  # from the file: finds its .data
    (got,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(got, np.asarray(fn(x)), rtol=1e-5, atol=1e-5)


@pytest.fixture
def umask_027():
    previous = os.umask(0o027)
    yield
    os.umask(previous)


@pytest.mark.parametrize("external_data", [False, True])
def test_written_files_honour_the_umask(tmp_path, umask_027, external_data):
    path = tmp_path / "m.onnx"
    to_onnx(_mlp, [("B", 64)], path=path, external_data=external_data)
    written = sorted(os.listdir(tmp_path))
    assert written == (["m.onnx", "m.onnx.data"] if external_data else ["m.onnx"])
    for name in written:
        assert os.stat(tmp_path / name).st_mode & 0o777 == 0o640, name


def test_a_missing_folder_fails_before_the_export_naming_the_path(tmp_path):
    calls = []

    def f(x):
        calls.append(1)
        return x * 2.0

    path = tmp_path / "no" / "such" / "m.onnx"
    with pytest.raises(FileNotFoundError, match=str(path).replace("\\", "\\\\")):
        to_onnx(f, [(2,)], path=path)
    with pytest.raises(IsADirectoryError, match="is a directory"):
        to_onnx(f, [(2,)], path=tmp_path)
    assert calls == []  # nothing was traced
    assert os.listdir(tmp_path) == []


def test_one_file_is_the_model_with_its_weights_streamed(tmp_path):
    path = tmp_path / "m.onnx"
    assert to_onnx(_mlp, [("B", 64)], path=path, external_data=False) == str(path)
    proto = to_onnx(_mlp, [("B", 64)])
    loaded = onnx.load(path)
    onnx.checker.check_model(loaded, full_check=True)
    assert sorted(t.name for t in loaded.graph.initializer) == sorted(
        t.name for t in proto.graph.initializer
    )
    by_name = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    for tensor in loaded.graph.initializer:
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(tensor), by_name[tensor.name])
    _check_runs_like_jax(str(path))


def test_external_data_is_referenced_by_the_model_and_aligned(tmp_path):
    path = tmp_path / "m.onnx"
    assert to_onnx(_mlp, [("B", 64)], path=path, external_data=True) == str(path)
    proto = onnx.load(path, load_external_data=False)
    external = [t for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert external and all(len(t.raw_data) == 0 for t in external)
    assert {e.value for t in external for e in t.external_data if e.key == "location"} == {
        "m.onnx.data"
    }
    assert os.path.getsize(path) < W.nbytes  # the weights are not in the model file
    loaded = onnx.load(path)  # with its data: the same tensors as the in-memory export
    by_name = {
        t.name: onnx.numpy_helper.to_array(t) for t in to_onnx(_mlp, [("B", 64)]).graph.initializer
    }
    for tensor in loaded.graph.initializer:
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(tensor), by_name[tensor.name])
    offsets = [int(e.value) for t in external for e in t.external_data if e.key == "offset"]
    assert all(o % 64 == 0 for o in offsets)
    _check_runs_like_jax(str(path))


def test_above_the_threshold_external_data_is_automatic_also_with_functions(tmp_path, monkeypatch):
    monkeypatch.setattr(save, "EXTERNAL_DATA_THRESHOLD", 1000)

    @onnx_function
    def block(x):
        return jnp.tanh(x @ W + B)

    def f(x):
        return block(x) @ W.T

    path = tmp_path / "f.onnx"
    to_onnx(f, [("B", 64)], path=path)
    assert len(onnx.load(path, load_external_data=False).functions) == 1
    assert sorted(os.listdir(tmp_path)) == ["f.onnx", "f.onnx.data"]
    assert os.path.getsize(path) < W.nbytes  # the weights are not in the model file
    _check_runs_like_jax(str(path), f)


@pytest.mark.slow
def test_a_model_above_two_gigabytes_is_written_with_external_data_and_runs_like_jax(tmp_path):
    # 9 x 8192 x 8192 float32 = 2.4 GB of weights, the blocks an ONNX function: past protobuf's
    # 2 GB, the file gets external data by itself; ~8 GB of RAM at the peak (onnxruntime's copy)
    width, depth = 8192, 9
    keys = jax.random.split(jax.random.key(0), depth)
    weights = [jax.random.normal(k, (width, width), jnp.float32) / width**0.5 for k in keys]

    @onnx_function
    def block(x, w):
        return jax.nn.relu(x @ w)

    def f(x):
        for w in weights:
            x = block(x, w)
        return x

    path = tmp_path / "big.onnx"
    assert to_onnx(f, [("B", width)], path=path) == str(path)
    assert sorted(os.listdir(tmp_path)) == ["big.onnx", "big.onnx.data"]
    assert (
        os.path.getsize(path) < 1e6
        and os.path.getsize(tmp_path / "big.onnx.data") >= depth * width * width * 4
    )
    assert len(onnx.load(path, load_external_data=False).functions) == 1
    x = np.asarray(jax.random.normal(jax.random.key(1), (2, width)), np.float32)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {session.get_inputs()[0].name: x})
    del session
    np.testing.assert_allclose(got, np.asarray(f(x)), rtol=1e-4, atol=1e-5)


def test_a_single_file_above_two_gigabytes_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(save, "PROTOBUF_LIMIT", 1000)
    model = export_model(_mlp, [("B", 64)])
    with pytest.raises(ValueError, match="external_data=True"):
        save_model(model, tmp_path / "m.onnx", external_data=False)
    assert os.listdir(tmp_path) == []


def test_external_data_needs_a_path():
    with pytest.raises(ValueError, match="needs a path"):
        to_onnx(_mlp, [("B", 64)], external_data=True)


# -- memory: peak RSS above the baseline (model built), over the weight bytes -----------------

_MEMORY_SCRIPT = """
import gc, json, os, sys
import jax, numpy as np
from jax2onnx_nn import export_model, to_onnx
from jax2onnx_nn.core.api import save_model

def rss(field):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(field + ":"))

width, depth, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
keys = jax.random.split(jax.random.key(0), depth)
weights = [jax.random.normal(k, (width, width), np.float32) / width**0.5 for k in keys]
weight_bytes = sum(w.nbytes for w in weights)

def mlp(x):
    for w in weights:
        x = jax.nn.relu(x @ w)
    return x

modes = {
    "external": lambda: to_onnx(mlp, [("B", width)], path=path, external_data=True),
    "export_model": lambda: save_model(export_model(mlp, [("B", width)]), path),
    "proto": lambda: to_onnx(mlp, [("B", width)]),
    "path": lambda: to_onnx(mlp, [("B", width)], path=path),
}
to_onnx(mlp, [("B", width)])  # imports and first-trace caches are not the export's
peaks = {}
for mode, export in modes.items():
    gc.collect()
    baseline = rss("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM restarts from here
    result = export()
    peaks[mode] = (rss("VmHWM") - baseline) / weight_bytes
    del result
print(json.dumps(peaks))
"""


@pytest.mark.skipif(
    not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's peak-RSS reset"
)
def test_export_memory_stays_below_the_weight_bytes(tmp_path):
    # 24 weights of 4 MB (~100 MB), all modes in one subprocess (peak RSS reset between them)
    proc = subprocess.run(
        [sys.executable, "-c", _MEMORY_SCRIPT, "1024", "24", str(tmp_path / "m.onnx")],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    peaks = json.loads(proc.stdout.strip().splitlines()[-1])
    # writing streams the weights from their buffers; a returned ModelProto is one copy by nature
    assert peaks["path"] < 0.3 and peaks["external"] < 0.3 and peaks["export_model"] < 0.3, peaks
    assert peaks["proto"] < 1.1, peaks


def test_a_rearranged_weight_is_computed_when_written_not_at_export(tmp_path):
    from flax import nnx

    conv = nnx.Conv(3, 8, kernel_size=(3, 3), rngs=nnx.Rngs(0))  # HWIO kernel, ONNX wants OIHW
    model = export_model(conv, [("B", 6, 6, 3)])
    (kernel,) = [
        v
        for v in model.graph.initializers.values()
        if v.const_value.shape == ir.Shape([8, 3, 3, 3])
    ]
    assert isinstance(kernel.const_value, ir.LazyTensor)
    save_model(model, tmp_path / "conv.onnx")
    _check_runs_like_jax(str(tmp_path / "conv.onnx"), conv, (2, 6, 6, 3))
