"""export_decoder: the folder onnxruntime-genai opens, generating JAX's greedy tokens."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import onnx
import pytest
from flax import nnx

from jax2onnx_nn.core.errors import SpecError
from jax2onnx_nn.genai import (
    CacheSpec,
    export_decoder,
    generate_genai,
    generate_jax,
    generate_onnx,
)
from tests.genai.models import Llama, scaled_init

EOS, PAD = 96, 0
LLAMA_CACHE = CacheSpec(num_layers=2, kv_heads=2, head_dim=16, max_length=64)
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [40, 41, 42]]


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> tuple[Llama, Path]:
    model = Llama(rngs=nnx.Rngs(1))
    scaled_init(model, 3.0)  # logits far from ties: 32 varied tokens, not one repeated
    folder = tmp_path_factory.mktemp("llama")
    export_decoder(
        model, folder, cache=LLAMA_CACHE, num_heads=4, eos_token_id=EOS, pad_token_id=PAD
    )
    return model, folder


def _generate(how: str, model: Llama, folder: Path, prompts: list[list[int]]) -> list[list[int]]:
    ids = {"max_new_tokens": 32, "pad_token_id": PAD}
    if how == "genai":
        pytest.importorskip("onnxruntime_genai")
        return generate_genai(folder, prompts, **ids)
    if how == "onnxruntime":
        return generate_onnx(folder, prompts, eos_token_id=EOS, **ids)
    return generate_jax(model, LLAMA_CACHE, prompts, eos_token_id=EOS, **ids)


@pytest.mark.parametrize("how", ["genai", "onnxruntime"])
def test_llama_generates_jax_tokens(llama: tuple[Llama, Path], how: str) -> None:
    model, folder = llama
    expected = _generate("jax", model, folder, PROMPTS[:1])
    assert len(expected[0]) == 32 and len(set(expected[0])) > 8
    assert _generate(how, model, folder, PROMPTS[:1]) == expected


def test_llama_batch_of_two_in_genai(llama: tuple[Llama, Path]) -> None:
    """Two prompts of one length (onnxruntime-genai 0.18 feeds a left-padded batch with an
    all-ones attention_mask and positions 0..S-1, so prompts of different lengths are checked
    in the onnxruntime loop below)."""
    model, folder = llama
    prompts = [PROMPTS[0], [30, 31, 32, 33, 34, 35, 36]]
    expected = [_generate("jax", model, folder, [p])[0] for p in prompts]
    assert _generate("genai", model, folder, prompts) == expected


@pytest.mark.parametrize("how", ["jax", "onnxruntime"])
def test_padded_batch_generates_each_prompts_tokens(llama: tuple[Llama, Path], how: str) -> None:
    """Prompts of different lengths, padded on the left and masked, in one batch, generate what
    each prompt generates alone."""
    model, folder = llama
    alone = [_generate("jax", model, folder, [p])[0] for p in PROMPTS]
    assert _generate(how, model, folder, PROMPTS) == alone


def test_graph_speaks_genai_names_with_symbolic_dims(llama: tuple[Llama, Path]) -> None:
    _, folder = llama
    graph = onnx.load(str(folder / "model.onnx")).graph

    def dims(value: onnx.ValueInfoProto) -> list[str | int]:
        return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]

    inputs = {v.name: dims(v) for v in graph.input}
    outputs = {v.name: dims(v) for v in graph.output}
    assert inputs["input_ids"] == ["batch_size", "sequence_length"]
    assert inputs["position_ids"] == ["batch_size", "sequence_length"]
    assert inputs["past_key_values.1.value"] == ["batch_size", 2, "past_sequence_length", 16]
    assert set(inputs) == {"input_ids", "attention_mask", "position_ids"} | {
        f"past_key_values.{i}.{kv}" for i in (0, 1) for kv in ("key", "value")
    }
    assert outputs["logits"] == ["batch_size", "sequence_length", 97]
    assert set(outputs) == {"logits"} | {
        f"present.{i}.{kv}" for i in (0, 1) for kv in ("key", "value")
    }
    assert outputs["present.0.key"][:2] == ["batch_size", 2]
    assert isinstance(outputs["present.0.key"][2], str)  # past + sequence, symbolic


def test_config_carries_the_sizes(llama: tuple[Llama, Path]) -> None:
    import json

    _, folder = llama
    config = json.loads((folder / "genai_config.json").read_text())
    decoder = config["model"]["decoder"]
    assert (decoder["num_hidden_layers"], decoder["num_key_value_heads"]) == (2, 2)
    assert (decoder["num_attention_heads"], decoder["head_size"], decoder["hidden_size"]) == (
        4,
        16,
        64,
    )
    assert config["model"]["vocab_size"] == 97 and config["model"]["context_length"] == 64
    assert config["search"]["past_present_share_buffer"] is False


def test_fixed_step_without_cache_index_is_refused(tmp_path: Path) -> None:
    def step(input_ids, position_ids, cache):  # type: ignore[no-untyped-def]
        return input_ids, cache

    with pytest.raises(SpecError, match=r"takes no `cache_index`.*layout='growing'"):
        export_decoder(
            step, tmp_path, cache=LLAMA_CACHE, num_heads=4, eos_token_id=1, pad_token_id=0
        )


def test_cache_of_another_layout_is_refused(tmp_path: Path) -> None:
    """A cache laid out [B, T, heads, head_dim] (nnx's own) is named, with what to change."""
    model = Llama(rngs=nnx.Rngs(0))

    def step(input_ids, position_ids, cache, *, cache_index, attention_mask):  # type: ignore[no-untyped-def]
        logits, new = model(
            input_ids, position_ids, cache, cache_index=cache_index, attention_mask=attention_mask
        )
        return logits, [(k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)) for k, v in new]

    with pytest.raises(
        SpecError, match=r"cache\[0\] key of shape \(1, 64, 2, 16\).*\[B, 2, 64, 16\].*transposed"
    ):
        export_decoder(
            step, tmp_path, cache=LLAMA_CACHE, num_heads=4, eos_token_id=1, pad_token_id=0
        )


def test_a_step_sized_by_the_constant_max_length_names_the_fix(tmp_path: Path) -> None:
    """A fixed-layout step is traced with the slots in use, not max_length: one that spans the
    cache with the constant gets the fix and its own line, nothing written."""
    spec = CacheSpec(num_layers=1, kv_heads=1, head_dim=8, max_length=16)

    def step(input_ids, position_ids, cache, *, cache_index, attention_mask):  # type: ignore[no-untyped-def]
        ((k, v),) = cache
        new = jnp.ones((input_ids.shape[0], 1, input_ids.shape[1], 8), k.dtype)
        k = jax.lax.dynamic_update_slice(k, new, (0, 0, cache_index, 0))
        v = jax.lax.dynamic_update_slice(v, new, (0, 0, cache_index, 0))
        seen = (attention_mask * (jnp.arange(16) <= cache_index)).sum(-1)  # 16: the constant
        return jnp.zeros((*input_ids.shape, 5)) + seen[:, None, None], [(k, v)]

    folder = tmp_path / "out"
    with pytest.raises(SpecError) as info:
        export_decoder(step, folder, cache=spec, num_heads=1, eos_token_id=1, pad_token_id=0)
    message = str(info.value)
    assert "works with a cache of max_length=16 slots but not with 15" in message
    assert "test_export.py:" in message and "k_cache.shape[2]" in message
    assert not folder.exists()


def test_a_failed_export_leaves_no_folder(tmp_path: Path) -> None:
    spec = CacheSpec(num_layers=1, kv_heads=1, head_dim=8, max_length=16)

    def step(input_ids, position_ids, cache, *, cache_index, attention_mask):  # type: ignore[no-untyped-def]
        logits = jnp.zeros((*input_ids.shape, 5)) + attention_mask.sum(-1)[:, None, None]
        return logits, cache

    folder = tmp_path / "out"
    with pytest.raises(TypeError, match="'opsett': did you mean 'opset'"):
        export_decoder(
            step, folder, cache=spec, num_heads=1, eos_token_id=1, pad_token_id=0, opsett=24
        )
    assert not folder.exists()


def test_unknown_layout_is_refused() -> None:
    with pytest.raises(ValueError, match="'fixed' or 'growing'.*paged"):
        CacheSpec(num_layers=1, kv_heads=1, head_dim=8, max_length=16, layout="paged")  # type: ignore[arg-type]


def test_logits_of_the_last_position_only_are_refused(tmp_path: Path) -> None:
    model = Llama(rngs=nnx.Rngs(0))

    def step(input_ids, position_ids, cache, *, cache_index, attention_mask):  # type: ignore[no-untyped-def]
        logits, new = model(
            input_ids, position_ids, cache, cache_index=cache_index, attention_mask=attention_mask
        )
        return logits[:, -1], new

    with pytest.raises(
        SpecError, match=r"logits must be float \[B, S, vocab\], got float32\(1, 97\)"
    ):
        export_decoder(
            step, tmp_path, cache=LLAMA_CACHE, num_heads=4, eos_token_id=1, pad_token_id=0
        )


def test_tokenizer_files_are_copied_in(llama: tuple[Llama, Path], tmp_path: Path) -> None:
    model, _ = llama
    tokenizer = tmp_path / "tok"
    tokenizer.mkdir()
    (tokenizer / "tokenizer.json").write_text("{}")
    (tokenizer / "unrelated.bin").write_text("")
    export_decoder(
        model,
        tmp_path / "out",
        cache=LLAMA_CACHE,
        num_heads=4,
        eos_token_id=EOS,
        pad_token_id=PAD,
        tokenizer=tokenizer,
    )
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "genai_config.json",
        "model.onnx",
        "tokenizer.json",
    ]


def test_growing_step_returning_only_the_new_keys_is_refused(tmp_path: Path) -> None:
    model = Llama(rngs=nnx.Rngs(0))
    growing = CacheSpec(num_layers=2, kv_heads=2, head_dim=16, max_length=64, layout="growing")

    def step(input_ids, position_ids, cache, *, attention_mask):  # type: ignore[no-untyped-def]
        batch, length = input_ids.shape
        buffers = [(jnp.zeros((batch, 2, 64, 16)),) * 2] * 2
        mask = jnp.pad(attention_mask, ((0, 0), (0, 64 - attention_mask.shape[1])))
        logits, new = model(
            input_ids, position_ids, buffers, cache_index=jnp.int32(0), attention_mask=mask
        )
        return logits, [(k[:, :, :length], v[:, :, :length]) for k, v in new]

    with pytest.raises(SpecError, match=r"cache\[0\] key of shape \(1, 2, 1, 16\).*past \+ S"):
        export_decoder(step, tmp_path, cache=growing, num_heads=4, eos_token_id=1, pad_token_id=0)


def test_shared_buffer_generates_jax_tokens(llama: tuple[Llama, Path], tmp_path: Path) -> None:
    """share_buffer=True: past and present are one [B, kv_heads, max_length, head_dim] buffer
    (onnxruntime-genai binds both to it), the mask [B, total_sequence_length]."""
    model, _ = llama
    result = export_decoder(
        model,
        tmp_path,
        cache=LLAMA_CACHE,
        num_heads=4,
        eos_token_id=EOS,
        pad_token_id=PAD,
        share_buffer=True,
    )
    assert result.config["search"]["past_present_share_buffer"] is True
    graph = onnx.load(str(tmp_path / "model.onnx")).graph
    shapes = {
        v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in [*graph.input, *graph.output]
    }
    assert shapes["past_key_values.0.key"] == ["batch_size", 2, "max_length", 16]
    assert shapes["present.0.key"] == ["batch_size", 2, "max_length", 16]
    assert shapes["attention_mask"] == ["batch_size", "total_sequence_length"]
    alone = [_generate("jax", model, tmp_path, [p])[0] for p in PROMPTS]
    assert _generate("onnxruntime", model, tmp_path, PROMPTS) == alone
    assert _generate("genai", model, tmp_path, PROMPTS[:1]) == alone[:1]


def test_shared_buffer_needs_the_fixed_layout(tmp_path: Path) -> None:
    growing = CacheSpec(num_layers=1, kv_heads=1, head_dim=8, max_length=16, layout="growing")
    with pytest.raises(ValueError, match=r"share_buffer=True needs CacheSpec\(layout='fixed'\)"):
        export_decoder(
            lambda *a, **k: None,
            tmp_path,
            cache=growing,
            num_heads=1,
            eos_token_id=1,
            pad_token_id=0,
            share_buffer=True,
        )
