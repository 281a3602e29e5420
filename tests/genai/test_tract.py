"""The decoder in tract: exported for it (``target="tract"``: the package's default opset, no
If), prefill and decode steps compute what the onnxruntime export computes in onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from flax import nnx

from jax2onnx_nn.genai import CacheSpec, export_decoder, padded_prompts
from tests.genai.models import Llama

tract = pytest.importorskip("tract")


def test_llama_steps_run_in_tract(tmp_path: Path) -> None:
    model = Llama(rngs=nnx.Rngs(0), layers=2)
    cache = CacheSpec(num_layers=2, kv_heads=2, head_dim=16, max_length=64)
    options = dict(cache=cache, num_heads=4, eos_token_id=96, pad_token_id=0)
    export_decoder(model, tmp_path / "ort", **options)  # type: ignore[arg-type]
    export_decoder(model, tmp_path / "tract", target="tract", **options)  # type: ignore[arg-type]
    session = ort.InferenceSession(str(tmp_path / "ort" / "model.onnx"))
    names = [i.name for i in session.get_inputs()]
    path = str(tmp_path / "tract" / "model.onnx")
    runnable = tract.onnx().load(path).into_model().into_runnable()
    ids, mask, positions = padded_prompts([[5, 6, 7, 8], [9, 10]], 0)
    past = [np.zeros((2, 2, 0, 16), np.float32)] * 4
    for _ in range(3):  # the prompt, then two tokens
        feeds = [ids, mask, positions, *past]
        expected = session.run(None, dict(zip(names, feeds, strict=True)))
        got = [out.to_numpy() for out in runnable.run(feeds)]
        for want, have in zip(expected, got, strict=True):
            np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-5)
        ids = expected[0][:, -1].argmax(-1).astype(np.int32)[:, None]
        positions = positions[:, -1:] + 1
        mask = np.concatenate([mask, np.ones((2, 1), np.int32)], axis=1)
        past = expected[1:]
