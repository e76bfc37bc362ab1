"""The bounded most-recently-used map every per-run cache of the stores and logs is made of."""

from __future__ import annotations

import threading

import pytest
from durable_harness.lru import LRU


def test_a_put_past_the_limit_drops_the_least_recently_put() -> None:
    cache: LRU[str, int] = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)  # a put makes its key the most recent: "b" is now the oldest
    cache.put("c", 3)
    assert (cache.get("a"), cache.get("b"), cache.get("c"), len(cache)) == (10, None, 3, 2)


def test_only_a_touching_get_makes_its_key_recent() -> None:
    cache: LRU[str, int] = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a plain read leaves "a" the oldest
    cache.put("c", 3)
    assert cache.get("a") is None
    assert cache.get("b", touch=True) == 2  # now "c" is the oldest
    cache.put("d", 4)
    assert (cache.get("b"), cache.get("c"), cache.get("d")) == (2, None, 4)


def test_put_returns_the_value_and_pop_removes_the_key() -> None:
    cache: LRU[str, list[int]] = LRU(4)
    value = [1]
    assert cache.put("a", value) is value
    assert cache.pop("a") is value
    assert (cache.pop("a"), cache.get("a"), len(cache)) == (None, None, 0)


def test_a_limit_of_zero_keeps_nothing_and_a_negative_one_is_refused() -> None:
    cache: LRU[str, int] = LRU(0)
    assert cache.put("a", 1) == 1
    assert (cache.get("a"), len(cache)) == (None, 0)
    with pytest.raises(ValueError, match="not -1"):
        LRU(-1)


def test_concurrent_puts_keep_the_bound() -> None:
    cache: LRU[int, int] = LRU(8)
    start = threading.Barrier(4)

    def fill(offset: int) -> None:
        start.wait(timeout=60)
        for i in range(2000):
            cache.put(offset * 10_000 + i, i)
            cache.get(offset * 10_000 + i // 2, touch=True)

    threads = [threading.Thread(target=fill, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert len(cache) == 8
