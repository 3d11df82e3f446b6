"""A backend's argument-validation error never carries an argument value back, in process or over stdio.

The arguments are drawn at random around a secret: strings holding ``]`` or ``, input_type=``,
nested lists, dict keys, unknown keys, wrong types at every level. Whatever the backend's
validator prints, the secret must appear nowhere in the batch response, structured or text.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest
from backends.probe import probe_server
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from centralmcp_batch import _compat, validation
from centralmcp_batch.router import Router, StdioBackend

HERE = Path(__file__).resolve().parent
SECRET = "qx9SECRET"
EXAMPLES = int(os.environ.get("CENTRALMCP_BATCH_PROPERTY_EXAMPLES", "40"))
PROPERTY_SETTINGS = settings(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    print_blob=True,
)

# Text around the secret that broke the old regex scrubbing, and pydantic's own punctuation.
TRICKS = ["]", ", input_type=", "input_value=", "[type=string_type, ", "\n", "'", '"', ".", "\nserial\n  "]
hiding = st.tuples(st.sampled_from(["", *TRICKS]), st.sampled_from(["", *TRICKS])).map(
    lambda ends: ends[0] + SECRET + ends[1]
)
leaves = st.one_of(hiding, st.integers(), st.floats(allow_nan=False), st.booleans(), st.none())
shapes = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.one_of(hiding, st.sampled_from(["a", "0"])), inner, max_size=3)
    ),
    max_leaves=8,
)
FIELDS = ["serial", "count", "tags", "filters", "mode"]
arguments = st.dictionaries(st.one_of(st.sampled_from(FIELDS), hiding), shapes, max_size=5)


def check_no_secret(answer: _compat.Answer) -> list[dict[str, Any]]:
    assert not answer.is_error, answer.text
    assert SECRET not in answer.text
    assert SECRET not in repr(answer.structured)
    return list(answer.structured["results"])


async def batch_over_session(router: Router, drawn: list[dict[str, Any]]) -> _compat.Answer:
    calls = [{"name": "probe_read", "arguments": args} for args in drawn]
    async with _compat.connect(router.server) as client:
        return await client.call_tool("invoke_read_tool_batch", {"calls": calls})


@pytest.fixture(scope="module")
def remote_router() -> Iterator[tuple[Router, anyio.from_thread.BlockingPortal]]:
    """One router over the probe backend as a stdio subprocess, connected for the whole module."""
    os.environ.setdefault("CENTRALMCP_ROUTER_RATE_PER_SECOND", "100000")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)])}
    router = Router({"probe": StdioBackend(sys.executable, (str(HERE / "backends" / "probe.py"),), env)})
    with anyio.from_thread.start_blocking_portal() as portal, portal.wrap_async_context_manager(router.connected()):
        assert router.catalog.find("probe_read") is not None, router.backend_errors
        yield router, portal


@pytest.fixture
def fast_limiter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_PER_SECOND", "100000")


@settings(PROPERTY_SETTINGS, max_examples=EXAMPLES)
@given(drawn=st.lists(arguments, min_size=1, max_size=25))
def test_in_process_validation_errors_never_carry_a_value(fast_limiter: None, drawn: list[dict[str, Any]]) -> None:
    router = Router({"probe": probe_server()})
    results = check_no_secret(anyio.run(batch_over_session, router, drawn))
    for item in results:
        if item["status"] == "error" and "invalid arguments" in item["error"]:
            assert item["error"].startswith("invalid arguments for tool 'probe_read': ")


@settings(PROPERTY_SETTINGS, max_examples=max(10, EXAMPLES // 2))
@given(drawn=st.lists(arguments, min_size=1, max_size=25))
def test_remote_validation_errors_never_carry_a_value(
    remote_router: tuple[Router, Any], drawn: list[dict[str, Any]]
) -> None:
    router, portal = remote_router
    check_no_secret(portal.call(batch_over_session, router, drawn))


LEAKED_BEFORE: list[dict[str, Any]] = [
    {"serial": "x", "count": f"a]{SECRET}"},
    {"serial": "x", "count": f"a, input_type={SECRET}"},
    {"serial": 1, "tags": [[f"{SECRET}"]]},
    {"serial": "x", "filters": {SECRET: "y"}},
]


@pytest.mark.anyio
async def test_the_four_inputs_of_the_issue_come_back_structured_without_the_value(fast_limiter: None) -> None:
    answer = await batch_over_session(Router({"probe": probe_server()}), LEAKED_BEFORE)
    errors = [item["error"] for item in check_no_secret(answer)]
    assert errors[2] == (
        "invalid arguments for tool 'probe_read': serial: Input should be a valid string [string_type]; "
        "tags[0][0]: Input should be a valid integer, unable to parse string as an integer [int_parsing]"
    )
    assert (
        errors[3] == "invalid arguments for tool 'probe_read': filters[<key>]: "
        "Input should be a valid integer, unable to parse string as an integer [int_parsing]"
    )


def test_the_four_inputs_over_stdio_are_told_from_the_tools_schema(remote_router: tuple[Router, Any]) -> None:
    # The backend's text arrives without pydantic's structured errors: the router checks the arguments
    # against the tool's published input schema, and tells what that check finds, in the schema's terms.
    router, portal = remote_router
    errors = [item["error"] for item in check_no_secret(portal.call(batch_over_session, router, LEAKED_BEFORE))]
    assert errors == [
        "invalid arguments for tool 'probe_read': count: expected integer",
        "invalid arguments for tool 'probe_read': count: expected integer",
        "invalid arguments for tool 'probe_read': serial: expected string; tags[0][0]: expected integer",
        "invalid arguments for tool 'probe_read': filters[<key>]: expected integer",
    ]


def test_messages_other_than_validation_errors_pass_unchanged() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert validation.retold("t", "backend is down", {"a": SECRET}, schema) == "backend is down"
    value_error = [{"type": "value_error", "loc": ("a",), "msg": f"Value error, {SECRET} is bad"}]
    assert (
        validation.retold("t", "1 validation error for tArguments", {"a": SECRET}, schema, details=value_error)
        == "invalid arguments for tool 't': a: the value is not valid [value_error]"
    )
