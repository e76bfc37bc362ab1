"""The checkpoint record format every store shares: deltas, folding, and what a save writes."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from durable_harness.checkpoints import records
from durable_harness.checkpoints.records import OPAQUE, Folded, diff, encode, fold, parse, patch, plan_save
from durable_harness.errors import CorruptCheckpointError
from durable_harness.sealed import dumps, seal


def roundtrip(old: Any, new: Any) -> Any:
    """``new`` as a store puts it together again: ``old`` plus the serialized delta."""
    ops = json.loads(dumps(diff(old, new)))
    return patch(json.loads(dumps(old)), ops)


def test_a_history_that_grows_costs_a_delta_the_size_of_what_was_added() -> None:
    old = {"messages": [{"role": "user", "text": "x" * 5_000}], "step": 1}
    new = {"messages": [*old["messages"], {"role": "assistant", "text": "hi"}], "step": 2}
    ops = diff(old, new)
    assert ops == [["t", ["messages"], 1, [{"role": "assistant", "text": "hi"}]], ["s", ["step"], 2]]
    assert roundtrip(old, new) == new


def test_the_last_element_changed_in_place_is_patched_not_rewritten() -> None:
    old = {"messages": [{"content": ["a" * 1_000]}, {"content": ["b"]}]}
    new = {"messages": [{"content": ["a" * 1_000]}, {"content": ["b", "c"]}, {"content": ["d"]}]}
    ops = diff(old, new)
    assert len(dumps(ops)) < 100
    assert roundtrip(old, new) == new


def test_numbers_and_booleans_keep_their_json_types() -> None:
    old = {"a": 1, "b": [True, 1.0], "c": {"d": 0}}
    new = {"a": 1.0, "b": [1, 1], "c": {"d": False}}
    assert dumps(roundtrip(old, new)) == dumps(new)


def test_a_grown_history_whose_equal_looking_prefix_changed_json_type_keeps_it() -> None:
    # ``==`` finds the prefix equal (1 == 1.0 == True); the delta must still carry the new types.
    old = {"messages": [{"n": 1}, {"text": "x" * 200}, {"flag": True}]}
    new = {"messages": [{"n": 1.0}, {"text": "x" * 200}, {"flag": 1}, {"text": "added"}]}
    assert dumps(roundtrip(old, new)) == dumps(new)


def test_random_edits_round_trip() -> None:
    rng = random.Random(7)

    def value(depth: int = 0) -> Any:
        roll = rng.random()
        if depth > 3 or roll < 0.3:
            return rng.choice([0, 1, 1.5, True, False, None, "", "a", "1"])
        if roll < 0.65:
            return {rng.choice("abcde"): value(depth + 1) for _ in range(rng.randint(0, 4))}
        return [value(depth + 1) for _ in range(rng.randint(0, 4))]

    def edit(v: Any) -> Any:
        v = json.loads(dumps(v))
        if isinstance(v, dict):
            if v and rng.random() < 0.3:
                del v[rng.choice(list(v))]
            key = rng.choice("abcdef")
            v[key] = edit(v[key]) if key in v and rng.random() < 0.5 else value(1)
        elif isinstance(v, list):
            roll = rng.random()
            if roll < 0.4:
                v.append(value(1))
            elif roll < 0.6 and v:
                v.pop()
            elif v:
                i = rng.randrange(len(v))
                v[i] = edit(v[i])
            else:
                v.insert(0, value(1))
        else:
            return value()
        return v

    for _ in range(2_000):
        old = {"root": value()}
        new = edit(old)
        # Key order may differ (a key set again goes last); values and JSON types may not.
        assert json.dumps(roundtrip(old, new), sort_keys=True) == json.dumps(new, sort_keys=True)


def test_fold_applies_deltas_after_the_last_full_record() -> None:
    records = [
        ("full", '{"n":[1]}'),
        ("delta", dumps(diff({"n": [1]}, {"n": [1, 2]}))),
        ("full", '{"other" : true}'),
        ("delta", dumps(diff({"other": True}, {"other": True, "n": [3]}))),
    ]
    assert json.loads(fold("ignored", records).text) == {"other": True, "n": [3]}
    assert fold('{"kept" :  1}', []).text == '{"kept" :  1}'  # a base or full record: the text as saved
    assert fold(None, records[:3]).text == '{"other" : true}'


@pytest.mark.parametrize(
    "base, records",
    [
        (None, [("delta", "[]")]),  # nothing to apply it to
        ('{"a":1}', [("delta", '[["t",["a"],0,[]]]')]),  # not a list
        ('{"a":1}', [("delta", '[["d",["b"]]]')]),  # no such key
        ('{"a":1}', [("delta", "not json")]),
        ('{"a":1}', [("weird", "{}")]),
        ("not json", [("delta", "[]")]),
    ],
)
def test_records_that_do_not_apply_are_a_clear_error(base: str | None, records: list[tuple[str, str]]) -> None:
    with pytest.raises(CorruptCheckpointError):
        fold(base, records)


def test_what_a_save_writes() -> None:
    small, big = '{"s":1}', dumps({"history": ["x" * 100] * 20})
    bigger = dumps({"history": ["x" * 100] * 21})
    # A run without records keeps a small state inline.
    plan, _ = plan_save(Folded(small, parse(small)), '{"s":2}', seq=0, base_bytes=len(small))
    assert plan.inline == '{"s":2}' and plan.record is None
    # A state bigger than INLINE_BYTES becomes a record: a delta when that is smaller.
    plan, folded = plan_save(Folded(big, parse(big)), bigger, seq=0, base_bytes=len(small))
    assert plan.record is not None and plan.record[0] == "delta" and len(plan.record[1]) < 200
    assert folded == Folded(bigger, json.loads(bigger)) and not plan.drop_base
    # Nothing changed: only the head moves.
    plan, _ = plan_save(Folded(bigger, parse(bigger)), bigger, seq=3, base_bytes=0)
    assert plan.record is None and plan.inline is None
    # A state unlike the last (or not JSON) is written whole, superseding an inline base.
    plan, _ = plan_save(Folded(big, parse(big)), dumps({"other": "y" * 1_000}), seq=3, base_bytes=40)
    assert plan.record is not None and plan.record[0] == "full" and plan.drop_base
    text = "not json " * 100
    plan, folded = plan_save(Folded(big, parse(big)), text, seq=3, base_bytes=0)
    assert plan.record == ("full", text) and folded.value is OPAQUE


# --- sealed history (issue 20): a writer's value diffed by identity, no whole-history work -------


def sealed_history(n: int) -> list[Any]:
    """``n`` sealed messages, as the loop's dump makes them."""
    return [seal({"role": "user", "content": [{"type": "text", "text": f"m{i}" * 50}]}) for i in range(n)]


def test_encode_writes_sealed_parts_as_their_text_and_copies_the_rest() -> None:
    history = sealed_history(3)
    runtime = {"notes": [1, 2.5, True, None, "é"]}
    value = {"turn": {"messages": history, "ctx": runtime, "step": 3}, "n": 1}
    text, copy = encode(value)
    assert text == dumps(value) and json.loads(text) == copy
    assert all(a is b for a, b in zip(copy["turn"]["messages"], history, strict=True))  # shared, not copied
    assert copy["turn"]["ctx"] is not runtime and copy["turn"]["ctx"] == runtime  # the caller's own: copied
    runtime["notes"].append("later")  # the caller goes on changing its own value
    assert copy["turn"]["ctx"]["notes"] == [1, 2.5, True, None, "é"]


def test_a_sealed_history_that_grew_costs_a_delta_of_what_was_added_without_serializing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    history = sealed_history(200)
    old = {"messages": history, "step": 1}
    added = seal({"role": "assistant", "content": [{"type": "text", "text": "hi"}]})
    new = {"messages": [*history, added], "step": 2}
    serialized: list[int] = []
    real = records.dumps
    monkeypatch.setattr(records, "dumps", lambda v: serialized.append(len(real(v))) or real(v))
    ops = diff(old, new)
    assert ops == [["t", ["messages"], 200, [added]], ["s", ["step"], 2]]
    assert sum(serialized) < 100  # the shared history was passed over, not serialized to compare it
    monkeypatch.undo()
    assert roundtrip(old, new) == new


def test_a_sealed_prefix_then_equal_looking_elements_of_another_json_type_keep_their_type() -> None:
    history = sealed_history(5)
    old = {"messages": [*history, {"n": 1}, {"flag": True}]}
    new = {"messages": [*history, {"n": 1.0}, {"flag": 1}, {"text": "added"}]}
    assert dumps(roundtrip(old, new)) == dumps(new)
    assert dumps(roundtrip({"h": [*history, [1]]}, {"h": [*history, [1.0]]})) == dumps({"h": [*history, [1.0]]})


def test_a_map_that_grew_skips_its_same_entries_and_sees_a_changed_or_removed_one() -> None:
    calls = {f"call_{i}": seal({"tool": "lookup", "input": {"q": i}}) for i in range(50)}
    grown = {**calls, "call_new": seal({"tool": "lookup", "input": {"q": "new"}})}
    assert diff({"calls": calls}, {"calls": grown}) == [["s", ["calls", "call_new"], grown["call_new"]]]
    changed = {**calls, "call_3": {"tool": "lookup", "input": {"q": 3.0}}}
    del changed["call_7"]
    assert dumps(roundtrip({"calls": calls}, {"calls": changed})) == dumps({"calls": changed})


def test_a_save_with_the_writers_value_writes_what_a_save_of_the_text_alone_writes() -> None:
    history = sealed_history(30)
    old_text, old_value = encode({"messages": history, "step": 1})
    for new in (
        {"messages": [*history, seal({"role": "assistant"})], "step": 2},  # grew
        {"messages": history[:3], "step": 2},  # cut back
        {"other": "y" * 2_000},  # replaced
        {"messages": history, "step": 1},  # the same
    ):
        text, value = encode(new)
        with_value = plan_save(Folded(old_text, old_value), text, seq=2, base_bytes=0, value=value)
        from_text = plan_save(Folded(old_text, parse(old_text)), text, seq=2, base_bytes=0)
        assert with_value[0] == from_text[0]
        assert with_value[1].text == text and with_value[1].value == json.loads(text)
