"""BoundedMemo: at most `size` entries, the least recently used dropped first; None values
are answers; None keys are never stored."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jax2onnx_nn.core.memo import BoundedMemo


@given(size=st.integers(1, 6), keys=st.lists(st.integers(0, 9), max_size=40))
def test_memo_keeps_the_most_recently_used_keys(size: int, keys: list[int]) -> None:
    memo: BoundedMemo[int] = BoundedMemo(size)
    recent: list[int] = []  # a model of LRU order: most recent last
    made: list[int] = []
    for key in keys:
        assert memo.get_or_make(key, lambda k=key: made.append(k) or k * 10) == key * 10
        if key in recent:
            recent.remove(key)
        else:
            assert made[-1] == key  # made only when not held
        recent.append(key)
        recent = recent[-size:]
        assert len(memo) == len(recent) and all(k in memo for k in recent)


def test_memo_stores_none_and_skips_none_keys() -> None:
    memo: BoundedMemo[None] = BoundedMemo(2)
    calls: list[str] = []
    assert memo.get_or_make("a", lambda: calls.append("a")) is None
    assert memo.get_or_make("a", lambda: calls.append("again")) is None
    assert calls == ["a"] and "a" in memo
    assert memo.get("missing", "default") == "default"
    memo.get_or_make(None, lambda: calls.append("none"))
    memo.get_or_make(None, lambda: calls.append("none"))
    assert calls == ["a", "none", "none"] and len(memo) == 1


def test_memo_get_refreshes_and_clear_empties() -> None:
    memo: BoundedMemo[int] = BoundedMemo(2)
    memo.put("a", 1)
    memo.put("b", 2)
    assert memo.get("a") == 1  # now "b" is the least recently used
    memo.put("c", 3)
    assert "b" not in memo and memo.get("a") == 1 and memo.get("c") == 3
    memo.clear()
    assert len(memo) == 0


def test_memo_needs_room() -> None:
    with pytest.raises(ValueError, match="at least one entry"):
        BoundedMemo(0)
