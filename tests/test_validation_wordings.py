"""A backend's error never brings an argument value back, whatever its wording, on both SDK lines.

Real stdio backends whose errors quote the value in words other than pydantic's: the SDK's low-level
``Server`` (jsonschema: ``'VALUE' is not of type 'integer'``, as an ``isError`` result and as a JSON-RPC
"Invalid params" error), a stand-in for the TypeScript SDK (zod: ``received 'VALUE'``, both ways too), a
bare JSON-RPC backend's -32602 in words of its own, and errors that are not about validation at all but
quote the value (``no site 'VALUE' in this region``). The router's clients reach it over an MCP session.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_validation_leaks import EXAMPLES, PROPERTY_SETTINGS, SECRET, arguments

from centralmcp_batch import _compat, validation
from centralmcp_batch.router import Router, StdioBackend

HERE = Path(__file__).resolve().parent
BACKENDS = {
    "lowlevel": HERE / "backends" / "lowlevel.py",
    "typescript": HERE / "standins" / "typescript_backend.py",
    "hostile": HERE / "backends" / "hostile.py",
}
WITHHELD = validation.WITHHELD


@pytest.fixture(scope="module")
def router() -> Iterator[tuple[Router, anyio.from_thread.BlockingPortal]]:
    """One router over the three backends as stdio subprocesses, connected for the whole module."""
    os.environ.setdefault("CENTRALMCP_ROUTER_RATE_PER_SECOND", "100000")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)])}
    remotes = {name: StdioBackend(sys.executable, (str(path),), env) for name, path in BACKENDS.items()}
    built = Router(remotes)
    with anyio.from_thread.start_blocking_portal() as portal, portal.wrap_async_context_manager(built.connected()):
        for tool in ("lowlevel_read", "ts_read", "rpc_invalid_params"):
            assert built.catalog.find(tool) is not None, built.backend_errors
        yield built, portal


async def errors_of(router: Router, calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Each call's error, as a batch entry and as a single read (which must agree), checked for the secret."""
    async with _compat.connect(router.server) as client:
        batch = await client.call_tool(
            "invoke_read_tool_batch", {"calls": [{"name": name, "arguments": args} for name, args in calls]}
        )
        singles = [
            await client.call_tool("invoke_read_tool", {"name": name, "arguments": args}) for name, args in calls
        ]
    for answer in (batch, *singles):
        assert not answer.is_error, answer.text
        assert SECRET not in answer.text and SECRET not in repr(answer.structured)
    items = batch.structured["results"]
    assert [item["status"] for item in items] == ["error"] * len(calls)
    assert [single.structured.get("error") for single in singles] == [item["error"] for item in items]
    return [item["error"] for item in items]


CASES: list[tuple[str, dict[str, Any], str]] = [
    # jsonschema's words, as the low-level Server answers them (an isError result, and JSON-RPC -32602)
    ("lowlevel_read", {"serial": "x", "count": SECRET}, "count: expected integer"),
    ("lowlevel_read", {"serial": "x", "mode": SECRET}, 'mode: expected one of "fast", "full"'),
    ("lowlevel_read", {"serial": "x", "tags": [1, SECRET]}, "tags[1]: expected integer"),
    ("lowlevel_read", {"serial": "x", "filters": {SECRET: SECRET}}, "filters[<key>]: expected integer"),
    ("lowlevel_read", {"serial": "x", SECRET: 1}, "(arguments): has a key the schema does not allow"),
    ("lowlevel_read", {"count": -1}, "count: must be at least 0; serial: required, and missing"),
    ("lowlevel_rpc", {"serial": [SECRET]}, "serial: expected string"),
    ("lowlevel_rpc", {"serial": "x", "mode": SECRET}, 'mode: expected one of "fast", "full"'),
    # zod's words, as the TypeScript SDK answers them
    ("ts_read", {"serial": "x", "mode": SECRET}, 'mode: expected one of "fast", "full"'),
    ("ts_read", {"serial": "x", SECRET: "y"}, "(arguments): has a key the schema does not allow"),
    ("ts_read_rpc", {"serial": "x", "mode": SECRET, "count": SECRET}, 'mode: expected one of "fast", "full"'),
]


@pytest.mark.parametrize(("tool", "args", "told"), CASES)
def test_argument_errors_in_any_wording_are_told_from_the_schema_alone(
    router: tuple[Router, Any], tool: str, args: dict[str, Any], told: str
) -> None:
    built, portal = router
    [error] = portal.call(errors_of, built, [(tool, args)])
    assert error.startswith(f"invalid arguments for tool {tool!r}: {told}"), error


def test_invalid_params_in_words_of_its_own_is_withheld(router: tuple[Router, Any]) -> None:
    # JSON-RPC -32602 says it is about the arguments, whatever the words; a schema with no fields leaves
    # the router nothing to check against, so it says only that.
    built, portal = router
    [error] = portal.call(errors_of, built, [("rpc_invalid_params", {"x": SECRET})])
    assert error == f"invalid arguments for tool 'rpc_invalid_params' {WITHHELD}"


def test_other_errors_pass_on_with_the_calls_own_values_cut_out(router: tuple[Router, Any]) -> None:
    built, portal = router
    long_value = f"{SECRET}-{'z' * 40}"
    errors = portal.call(
        errors_of,
        built,
        [
            ("lowlevel_lookup", {"site": f"site-{SECRET}"}),
            ("ts_lookup", {"device": SECRET}),
            ("ts_lookup", {"device": f'quote"and\\slash{SECRET}'}),  # escaped in the text
            ("ts_lookup", {"device": long_value}),
        ],
    )
    assert errors[0] == f"no site '{validation.REDACTED}' in this region"
    assert errors[1] == f'Error: device "{validation.REDACTED}" not found'
    assert errors[2] == f'Error: device "{validation.REDACTED}" not found'
    assert errors[3] == f'Error: device "{validation.REDACTED}" not found'


TOOLS = [
    "lowlevel_read",
    "lowlevel_rpc",
    "lowlevel_lookup",
    "ts_read",
    "ts_read_rpc",
    "ts_lookup",
    "rpc_invalid_params",
]


@settings(PROPERTY_SETTINGS, max_examples=max(10, EXAMPLES // 2))
@given(drawn=st.lists(st.tuples(st.sampled_from(TOOLS), arguments), min_size=1, max_size=25))
def test_no_backend_error_carries_a_value(router: tuple[Router, Any], drawn: list[tuple[str, dict[str, Any]]]) -> None:
    built, portal = router

    async def check() -> None:
        calls = [{"name": name, "arguments": args} for name, args in drawn]
        async with _compat.connect(built.server) as client:
            answer = await client.call_tool("invoke_read_tool_batch", {"calls": calls})
        assert not answer.is_error, answer.text
        assert SECRET not in answer.text and SECRET not in repr(answer.structured)

    portal.call(check)


# -- the two rules, on plain data ----------------------------------------------------------


def test_an_argument_error_is_told_by_its_code_or_a_validators_words() -> None:
    assert validation.is_argument_error("anything at all", validation.INVALID_PARAMS)
    for text in (
        "1 validation error for get_siteArguments",
        "Input validation error: 'x' is not of type 'integer'",
        "MCP error -32602: Input validation error: Invalid arguments for tool t: []",
        "'serial' is a required property",
        '[{"code": "invalid_enum_value"}]',
    ):
        assert validation.is_argument_error(text), text
    assert not validation.is_argument_error("the device said no", -32603)


def test_redaction_finds_a_value_however_the_backend_wrote_it() -> None:
    value = f'it\'s "{SECRET}"\n\u00e9'
    for written in (value, repr(value), json.dumps(value), json.dumps(value, ensure_ascii=False)):
        assert SECRET not in validation.redacted(f"bad value {written} here", {"v": value})
    long_value = "k" * 30 + SECRET + "z" * 30
    cut_short = f"value {long_value[:40]}... was refused"  # the backend printed only its start
    assert SECRET not in validation.redacted(cut_short, {"v": long_value})
    numbers = validation.redacted("12345 and 0.00001 and 1e-05 but 42", {"n": 12345, "f": 1e-05, "small": 42})
    assert numbers == "<value> and <value> and <value> but 42"  # under 4 characters, a value is not told apart


def test_redaction_keeps_the_schemas_names_and_cuts_the_callers_keys() -> None:
    text = f"mode {SECRET} is not known for serial x"
    assert validation.redacted(text, {"mode": "fast", SECRET: 1}, {"mode", "serial"}) == (
        "mode <value> is not known for serial x"
    )


def test_redaction_is_bounded_by_the_text_and_the_arguments() -> None:
    arguments = {f"k{i}": f"{SECRET}{i:05d}" * 3 for i in range(600)}  # about 20,000 bytes, as a batch allows
    text = " ".join(f"{SECRET}{i:05d}" for i in range(0, 600, 3)) * 4
    started = time.perf_counter()
    told = validation.redacted(text, arguments)
    assert time.perf_counter() - started < 2.0  # a wide margin: it takes a few milliseconds
    assert SECRET not in told and len(told) <= validation.MAX_ERROR_CHARS


def test_the_schema_check_runs_no_regular_expression_of_the_backends() -> None:
    # A pattern that backtracks for ever on this text, as a key pattern and as a value pattern.
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "pattern": "^(a+)+$"}, "count": {"type": "integer"}},
        "patternProperties": {"^(a+)+$": {"type": "string"}},
        "additionalProperties": False,
    }
    started = time.perf_counter()
    told = validation.schema_problems({"name": "a" * 40 + "!", "a" * 40 + "!": 1, "count": "x"}, schema)
    assert time.perf_counter() - started < 2.0
    assert told == "count: expected integer"


def test_the_schema_check_follows_no_reference_out_of_the_schema() -> None:
    schema = {"type": "object", "properties": {"x": {"$ref": "https://schemas.example.test/x.json"}}}
    assert validation.schema_problems({"x": 1}, schema) is None  # jsonschema refuses to fetch it: nothing to tell
    assert validation.schema_problems({"x": 1}, {}) is None
