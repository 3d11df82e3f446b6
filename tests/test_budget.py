"""The shrink stages, each only while the response is still over the budget."""

from __future__ import annotations

import datetime
import json
import math
import subprocess
import sys
from typing import Any

import pydantic_core
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import types

from centralmcp_batch import budget, engine
from centralmcp_batch.models import Outcome


def item(index: int, status: str = "ok", result: Any = None, error: str = "", call_id: str = "") -> dict[str, Any]:
    outcome = Outcome(status, result=result) if status == "ok" else Outcome(status, error=error)
    return engine.make_item(index, call_id or str(index), "tool", "srv", outcome)


def response(*items: dict[str, Any]) -> dict[str, Any]:
    return engine.assemble(list(items))


def test_a_response_within_budget_is_untouched() -> None:
    original = response(item(0, result={"a": 1}))
    fitted = budget.fit(dict(original), 10_000)
    assert fitted == original and fitted["truncated"] is False


def test_stage_one_drops_ok_results_last_first_only_as_needed() -> None:
    big = "x" * 2000
    fitted = budget.fit(response(item(0, result=big), item(1, result=big), item(2, result=big)), 5000)
    assert budget.size(fitted) <= 5000 and fitted["truncated"] is True
    assert fitted["results"][0]["result"] == big and fitted["results"][1]["result"] == big
    assert fitted["results"][2] == {
        "index": 2,
        "id": "2",
        "tool": "tool",
        "server": "srv",
        "status": "ok",
        "result": None,
        "result_truncated": True,
    }


def test_stage_two_shortens_errors_after_results_are_gone() -> None:
    errors = [item(i, "error", error="E" * 500) for i in range(6)]
    fitted = budget.fit(response(item(9, result="r" * 100), *errors), 2600)
    assert budget.size(fitted) <= 2600
    assert fitted["results"][0]["result"] is None
    shortened = [it for it in fitted["results"] if it.get("error_truncated")]
    assert shortened and all(len(it["error"]) == 80 for it in shortened)
    assert fitted["results"][-1].get("error_truncated") is True  # last first
    assert "skeleton" not in fitted


def test_stage_three_keeps_the_skeleton_of_every_entry() -> None:
    items = [item(i, "error", error="E" * 500, call_id=f"call-{i}") for i in range(25)]
    fitted = budget.fit(response(*items), 1024)
    assert budget.size(fitted) <= 1024 and fitted["skeleton"] is True
    assert fitted["counts"] == {"total": 25, "succeeded": 0, "failed": 25}
    assert fitted["failed_indexes"] == list(range(25))
    kept = fitted["results"]
    assert all(set(it) == {"index", "id", "status"} for it in kept)
    assert [it["index"] for it in kept] == list(range(len(kept)))


def test_failed_entries_outlive_ok_ones_in_the_skeleton() -> None:
    items = [item(i, result="r" * 300, call_id=f"ok-{i:02d}-" + "p" * 40) for i in range(20)]
    items += [item(20 + i, "error", error="E" * 300, call_id=f"bad-{i}-" + "q" * 40) for i in range(5)]
    fitted = budget.fit(response(*items), 1200)
    assert budget.size(fitted) <= 1200
    statuses = [it["status"] for it in fitted["results"]]
    assert statuses.count("error") == 5 and fitted["omitted"] >= 1


def test_failed_ids_are_cut_before_a_failed_entrys_own_skeleton_item() -> None:
    # DESIGN: a failed entry never loses its index, id and status while the skeleton fits. Before, the skeleton
    # left out failed items (their status with them) and kept failed_ids whole: here 6 of the 10 items stayed,
    # where all 10 fit once failed_ids is cut (its ids are the caller's own, found again by failed_indexes).
    items = [item(i, "unknown_tool", error="Unknown tool", call_id=f"{i:02d}" + "x" * 28) for i in range(10)]
    fitted = budget.fit(response(*items), 1024)
    assert budget.size(fitted) <= 1024 and fitted["skeleton"] is True
    assert [(it["index"], it["id"], it["status"]) for it in fitted["results"]] == [
        (i, f"{i:02d}" + "x" * 28, "unknown_tool") for i in range(10)
    ]
    assert "omitted" not in fitted and fitted["failed_ids_truncated"] is True
    assert fitted["failed_indexes"] == list(range(10))


def test_the_last_resort_still_fits_with_the_longest_ids() -> None:
    items = [item(i, "error", error="E" * 500, call_id=f"{i:03d}" + "i" * 97) for i in range(25)]
    fitted = budget.fit(response(*items), 1024)
    assert budget.size(fitted) <= 1024
    assert fitted["failed_indexes"] == list(range(25)) and fitted["counts"]["failed"] == 25
    assert fitted.get("failed_ids_truncated") is True


def test_sizes_are_measured_as_compact_utf8() -> None:
    assert budget.size({"a": "é"}) == len('{"a":"é"}'.encode())
    assert budget.encode([1, 2]) == b"[1,2]"


def test_sizes_are_measured_with_the_encoder_the_sdks_write_the_answer_with() -> None:
    # Both SDK lines write a tool's answer with pydantic, which writes these floats otherwise than json (and
    # otherwise from one pydantic-core release to another: 1e16 as 1e16 or as 1e+16): as the SDK writes its result.
    for value in [1e-05, 1.5e-07, 1e16, -0.0]:
        sent = types.CallToolResult(content=[], structuredContent={"f": value}).model_dump_json(by_alias=True)
        assert budget.encode({"f": value}).decode() in sent
        assert budget.size({"f": value}) == len(pydantic_core.to_json({"f": value}))
    assert budget.encode([1e-05]) != json.dumps([1e-05], separators=(",", ":")).encode()
    assert budget.encode({None: 1, 2: 3}) == pydantic_core.to_json({None: 1, 2: 3}) == b'{"None":1,"2":3}'
    odd = 'é\u2028"\\\n\x00\x7f😀'
    assert (
        budget.string_size(odd) == len(pydantic_core.to_json(odd)) == len(json.dumps(odd, ensure_ascii=False).encode())
    )
    assert budget.dumps({"a": [odd, 1e-05]}) == pydantic_core.to_json({"a": [odd, 1e-05]}).decode()


def test_a_response_already_checked_is_written_the_same_without_checking_again() -> None:
    whole = response(item(0, result={"f": 1e-05, "s": "é\n"}), item(1, "error", error="E"))
    assert budget.written(whole) == budget.dumps(whole)
    # what the SDKs write of a structured content holding NaN, should one ever be left in it
    assert budget.written({"r": math.nan}) == '{"r":null}'


@pytest.mark.parametrize("value", [math.nan, math.inf, {1, 2}, b"bytes", datetime.date(2026, 1, 1), object()])
def test_what_is_not_plain_json_is_refused_where_pydantic_would_write_it_its_own_way(value: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        budget.size({"result": value})
    with pytest.raises(ValueError, match="surrogates not allowed"):
        budget.size({"result": "\ud800"})
    with pytest.raises(RecursionError):
        budget.size(nested_lists(300))  # json writes it; pydantic, as the SDKs, does not
    assert budget.size(nested_lists(200)) == 2 * 200 + 1


def nested_lists(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


def test_a_response_one_byte_over_is_truly_shrunk_not_only_marked() -> None:
    # "truncated":true is a byte shorter than "truncated":false: one byte over would fit by the mark alone.
    whole = response(item(0, result="r" * 300), item(1, result="s" * 300))
    over_by_one = budget.size(whole) - 1
    fitted = budget.fit(whole, over_by_one)
    assert budget.size(fitted) <= over_by_one and fitted["truncated"] is True
    assert fitted["results"][1]["result_truncated"] is True and fitted["results"][0]["result"] == "r" * 300


def test_a_marker_that_would_outweigh_its_result_or_error_is_not_put_in() -> None:
    # The tiny results last in call order would each grow by being dropped; the large one first shrinks.
    tiny = [item(i, result={"i": i}) for i in range(1, 4)]
    slightly_long = item(4, "error", error="E" * 85)  # cut to 80 with its marker: longer than it was
    whole = response(item(0, result="r" * 300), *tiny, slightly_long)
    limit = budget.size(whole) - 10
    fitted = budget.fit(whole, limit)
    assert budget.size(fitted) <= limit and "skeleton" not in fitted
    assert fitted["results"][0]["result_truncated"] is True
    assert [it["result"] for it in fitted["results"][1:4]] == [{"i": 1}, {"i": 2}, {"i": 3}]
    assert fitted["results"][4]["error"] == "E" * 85 and "error_truncated" not in fitted["results"][4]


def test_a_cyclic_value_is_not_json_even_with_a_raised_recursion_limit() -> None:
    # Without cycle checks the C encoder recurses until the C stack gives out: a crash, not an exception.
    script = (
        "import sys; sys.setrecursionlimit(1_000_000)\n"
        "from centralmcp_batch import budget\n"
        "cycle = {}; cycle['self'] = cycle\n"
        "try:\n    budget.size({'result': cycle})\nexcept ValueError as exc:\n    print('not JSON:', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("not JSON:"), (done.returncode, done.stderr[-500:])


def test_a_failed_encoding_leaves_nothing_behind_for_the_next() -> None:
    inner: list[Any] = [1]
    outer: list[Any] = [inner, object()]
    with pytest.raises(TypeError):
        budget.dumps(outer)  # fails inside outer: the encoder was still in it
    outer.pop()
    assert budget.dumps(outer) == "[[1]]"  # not taken for a cycle


# -- nesting, read off the encoded text ------------------------------------------------


def levels_of(value: Any) -> int:
    """Levels of objects and arrays, walked: what ``budget.nesting`` must read off the text."""
    deepest, frontier = 0, [value]
    while frontier := [item for item in frontier if isinstance(item, dict | list)]:
        deepest += 1
        frontier = [child for item in frontier for child in (item.values() if isinstance(item, dict) else item)]
    return deepest


# Text that looks like structure: brackets, quotes and backslashes in every arrangement, escaped
# characters beside them (a newline, a control character, a non-ASCII letter, an emoji).
TRICKY_TEXT = st.text(st.sampled_from(list('{}[]"\\:,ab\n\x01\u00e9\U0001f600')), max_size=12)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TRICKY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TRICKY_TEXT, inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=600, deadline=None)
@given(JSON_VALUES)
def test_nesting_read_off_the_text_is_the_values_own(value: Any) -> None:
    assert budget.nesting(budget.dumps(value), 1_000) == levels_of(value)


@pytest.mark.parametrize(
    ("value", "levels"),
    [
        ("scalar", 0),
        ({}, 1),
        ([], 1),
        ({"a": [1, {"b": 2}]}, 3),
        ({"{[": "]}", "\\": ['"', '\\"', '"{"'], "k": {"x": "\u00e9[", "y": [[]]}}, 4),
        ([[], [[]], [[[]]], {}], 4),
        ((1, (2, (3,))), 3),  # a tuple is written as an array
    ],
)
def test_nesting_counts_containers_and_nothing_inside_strings(value: Any, levels: int) -> None:
    assert budget.nesting(budget.dumps(value), 100) == levels == levels_of(json.loads(budget.dumps(value)))


def test_nesting_stops_counting_past_its_limit_and_has_no_recursion_limit() -> None:
    text = "[" * 5_000 + "1" + "]" * 5_000  # deeper than Python's recursion limit, or the encoder's
    assert budget.nesting(text, 10_000) == 5_000
    assert budget.nesting(text, 4_999) == 5_000
    assert budget.nesting(text, 200) == 201


def test_nesting_of_text_utf8_cannot_hold_raises_as_its_size_does() -> None:
    with pytest.raises(UnicodeEncodeError):
        budget.nesting('["\ud800"]', 10)
    with pytest.raises(UnicodeEncodeError):
        budget.text_size('["\ud800"]')
