"""The published output schema: real answers of every shape validate, wrong shapes do not, and it
stays the lean, flat schema a client can check cheaply on every call (the cost is in the benchmark)."""

from __future__ import annotations

import json
from typing import Any, get_args

import jsonschema
import pytest

from centralmcp_batch import _compat, hosting, models
from centralmcp_batch.models import BatchOutcome, output_schema
from centralmcp_batch.settings import RESPONSE_MAX_BYTES
from centralmcp_batch.testing import call, sample_host

pytestmark = pytest.mark.anyio

SCHEMA = output_schema()


def schema_nodes(schema: Any) -> list[dict[str, Any]]:
    """Every subschema, the root included."""
    found = [schema]
    for key in ("properties",):
        for child in schema.get(key, {}).values():
            found += schema_nodes(child)
    if isinstance(schema.get("items"), dict):
        found += schema_nodes(schema["items"])
    return found


def test_the_schema_is_valid_draft_07_and_flat() -> None:
    assert SCHEMA["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert jsonschema.validators.validator_for(SCHEMA) is jsonschema.Draft7Validator
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    text = json.dumps(SCHEMA)
    # $ref is resolved and anyOf/oneOf tried once per item on every check: the cost this schema avoids.
    assert all(word not in text for word in ("$ref", "$defs", "definitions", "anyOf", "oneOf", "allOf"))
    assert len(schema_nodes(SCHEMA)) <= 8  # each node is metaschema-checked per call on SDK 1.x


def test_the_schema_agrees_with_the_models() -> None:
    results = SCHEMA["properties"]["results"]
    assert "items" not in results  # typed items cost every check a descent per item (see models.output_schema)
    assert all(status in results["description"] for status in get_args(models.Status))
    assert set(SCHEMA["properties"]) <= set(models.BatchResponse.model_fields) | set(models.BatchRejection.model_fields)
    assert results["maxItems"] == models.MAX_CALLS
    described = SCHEMA["description"] + results["description"]
    every_key = set(models.BatchResponse.model_fields) | set(models.BatchItem.model_fields)
    undeclared = every_key - set(SCHEMA["properties"])
    assert all(name in described for name in undeclared)  # every key the schema does not type is at least named


async def published_schema(server: Any) -> dict[str, Any]:
    async with _compat.connect(server) as client:
        tools = {tool.name: tool for tool in await client.list_tools()}
    schema = tools["invoke_read_tool_batch"].output_schema
    assert schema is not None
    return schema


def shrinking_server(monkeypatch: pytest.MonkeyPatch, budget: int) -> Any:
    monkeypatch.setenv(RESPONSE_MAX_BYTES, str(budget))
    host = sample_host()
    host.add("blob", lambda kb=1: {"rows": ["x" * 1000] * kb})
    server = _compat.new_server("schema-test")
    hosting.install(server, host)
    return server


BATCHES = {
    "all ok": [{"name": "echo", "id": f"e{i}", "arguments": {"q": i}} for i in range(25)],
    "every status": [
        {"name": "echo", "id": "ok"},
        {"name": "delete_everything", "id": "blocked"},
        {"name": "nope", "id": "unknown"},
        {"name": "echo", "id": "cursor", "cursor": "slow:page:1"},
        {"name": "echo", "id": "bad", "arguments": "not an object"},
        {"id": "no name"},
    ],
    "rejected": [],
}


@pytest.mark.parametrize("batch", sorted(BATCHES))
async def test_real_answers_validate_against_the_published_schema(centralmcp_server: Any, batch: str) -> None:
    schema = await published_schema(centralmcp_server)
    assert schema == SCHEMA
    answer = await call(centralmcp_server, "invoke_read_tool_batch", {"calls": BATCHES[batch]})
    assert not answer.is_error, answer.text  # the SDK client has already checked it against the schema
    jsonschema.validate(answer.structured, schema)
    BatchOutcome.model_validate(answer.structured)  # and the strict models agree


@pytest.mark.parametrize(("budget", "shape"), [(20_000, "truncated"), (1_024, "skeleton")])
async def test_shrunk_answers_validate(monkeypatch: pytest.MonkeyPatch, budget: int, shape: str) -> None:
    server = shrinking_server(monkeypatch, budget)
    calls = [{"name": "blob", "id": f"b{i}" * 30, "arguments": {"kb": 8}} for i in range(25)]
    answer = await call(server, "invoke_read_tool_batch", {"calls": calls})
    assert not answer.is_error, answer.text
    response = answer.structured
    assert response["truncated"] is True
    assert (response.get("skeleton") is True) == (shape == "skeleton")
    jsonschema.validate(response, await published_schema(server))
    BatchOutcome.model_validate(response)


def a_response() -> dict[str, Any]:
    from centralmcp_batch import engine

    items = [engine.make_item(i, f"e{i}", "echo", "inline", models.Outcome("ok", result={"i": i})) for i in range(3)]
    return json.loads(json.dumps(engine.assemble(items)))


def broken(change: str) -> Any:
    response = a_response()
    if change == "no ok":
        del response["ok"]
    elif change == "ok not a boolean":
        response["ok"] = "yes"
    elif change == "results not a list":
        response["results"] = {"0": response["results"][0]}
    elif change == "counts incomplete":
        del response["counts"]["failed"]
    elif change == "over 25 results":
        response["results"] *= 9
    elif change == "not an object":
        response = [response]
    return response


@pytest.mark.parametrize(
    "change",
    [
        "no ok",
        "ok not a boolean",
        "results not a list",
        "counts incomplete",
        "over 25 results",
        "not an object",
    ],
)
def test_wrong_shapes_fail_the_schema(change: str) -> None:
    jsonschema.validate(a_response(), SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken(change), SCHEMA)


async def test_the_answer_is_checked_once_a_round_trip_by_the_client(monkeypatch: pytest.MonkeyPatch) -> None:
    # The tool hands the SDK a finished CallToolResult: SDK 1.x's server passes that on unchecked
    # (it checks a plain dict's structured content), so only the client's check costs the round trip.
    checks: list[Any] = []
    real_validate = jsonschema.validate

    def counted(instance: Any, schema: Any, *args: Any, **kwargs: Any) -> None:
        checks.append(schema)
        real_validate(instance, schema, *args, **kwargs)

    server = _compat.new_server("checked-once")
    hosting.install(server, sample_host())
    async with _compat.connect(server) as client:
        await client.list_tools()
        monkeypatch.setattr(jsonschema, "validate", counted)
        answer = await client.call_tool("invoke_read_tool_batch", {"calls": [{"name": "echo"}]})
    assert not answer.is_error and answer.structured is not None
    output_checks = [schema for schema in checks if schema == SCHEMA]
    assert len(output_checks) == (0 if _compat.SDK_2 else 1)  # 2.x's client compiles its validator instead
