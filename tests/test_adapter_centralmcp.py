"""The CentralMCP host glue against a faithful stand-in of its tool router module."""

from __future__ import annotations

import importlib.util
import itertools
import json
import logging
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from installed import fresh_name, install_distribution
from standins import monitoring_backend
from standins.centralmcp_middleware import is_secret_name

from centralmcp_batch import HostContractError, PluginError, _compat, batch_tool, engine, validation
from centralmcp_batch.adapters import centralmcp
from centralmcp_batch.entries import parse_entry
from centralmcp_batch.host import HostHooks
from centralmcp_batch.items import entry_share
from centralmcp_batch.models import CallContext
from centralmcp_batch.testing import HostConformance, call

pytestmark = pytest.mark.anyio

TESTS = Path(__file__).parent
STANDIN = TESTS / "standins" / "centralmcp_router.py"
_fresh = itertools.count()


def load_router(monkeypatch: pytest.MonkeyPatch, mode: str = "default") -> ModuleType:
    """A fresh copy of the stand-in router, imported under ``CENTRALMCP_ROUTER_MODE=mode``."""
    monkeypatch.setenv("CENTRALMCP_ROUTER_MODE", mode)
    spec = importlib.util.spec_from_file_location(f"standin_router_{next(_fresh)}", STANDIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monitoring_backend.calls.clear()
    return module


class Tokens:
    """A rate gate as the router's operator installs one: it counts what it is awaited for."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self) -> None:
        self.count += 1


@pytest.fixture
def router(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_router(monkeypatch, "minimal")


@pytest.fixture
def tokens(router: ModuleType) -> Tokens:
    gate = Tokens()
    router.set_dispatch_rate_gate(gate)
    return gate


@pytest.fixture
def adopted(router: ModuleType, tokens: Tokens) -> ModuleType:
    centralmcp.adopt(router)
    return router


async def batch(router: ModuleType, calls: list[dict[str, Any]]) -> dict[str, Any]:
    answer = await call(router.mcp, "invoke_read_tool_batch", {"calls": calls})
    assert not answer.is_error, answer.text
    return answer.structured


def single_read(answer: _compat.Answer) -> Any:
    """What the router's own ``invoke_read_tool`` answered.

    The tool returns ``Any``. From Python 3.11 on ``typing.Any`` is a class, which the SDKs give no
    output schema; on 3.10 it is not, and both SDK lines wrap the structured content in
    ``{"result": ...}`` (the text is the answer itself on both).
    """
    payload = answer.payload
    if sys.version_info < (3, 11) and isinstance(payload, dict) and payload.keys() == {"result"}:
        return payload["result"]
    return payload


def refusal(name: str) -> str:
    return (
        f"Tool '{name}' is not read-only. "
        "Use invoke_tool only after explicit user intent for write/destructive actions."
    )


async def test_catalog_maps_the_loaded_backend_index_and_server_names(router: ModuleType) -> None:
    hooks = centralmcp.CentralMCPHooks(router)
    ref = hooks.centralmcp_find_tool(name="list_devices")
    assert (ref.name, ref.server, ref.read_only) == ("list_devices", "aruba-monitoring", True)
    assert ref.annotations["idempotentHint"] is True
    assert hooks.centralmcp_find_tool(name="reboot_device").annotations["destructiveHint"] is True
    assert hooks.centralmcp_find_tool(name="list_sites").server == "aruba-config"
    assert hooks.centralmcp_find_tool(name="no_such_tool") is None
    monitoring = {
        "list_devices",
        "get_device",
        "get_device_events",
        "get_device_clock",
        "get_radio_stats",
        "get_client_details",
        "get_webhook",
        "check_webhook_secret",
        "get_webhook_report",
        "get_running_config",
        "get_webhook_by_number",
        "count_devices_by_tag",
        "get_site_by_code",
        "ping_device",
    }
    assert set(router._tool_index) == monitoring | {"list_sites", "rename_site", "reboot_device"}
    assert {router._tool_backend_names[n] for n in monitoring} == {"aruba-monitoring"}


async def test_write_destructive_and_diagnostic_are_refused_with_the_routers_message(
    adopted: ModuleType, tokens: Tokens
) -> None:
    names = ["rename_site", "reboot_device", "ping_device"]
    response = await batch(
        adopted, [{"name": n, "arguments": {"serial": "x", "site_id": "hq", "name": "y"}} for n in names]
    )
    assert [(i["status"], i["error"]) for i in response["results"]] == [("blocked", refusal(n)) for n in names]
    assert [i["server"] for i in response["results"]] == ["aruba-config", "aruba-config", "aruba-monitoring"]
    single = await call(adopted.mcp, "invoke_read_tool", {"name": "ping_device", "arguments": {"serial": "x"}})
    assert single_read(single)["error"] == refusal("ping_device")  # the router's own gate says the same
    assert monitoring_backend.calls == [] and tokens.count == 0


async def test_the_routers_own_read_only_test_decides_and_without_one_the_annotations_do(
    adopted: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = [{"name": "get_device", "arguments": {"serial": "a"}}]
    # A router that tightens its own test refuses the tool in a batch too, as in invoke_read_tool.
    monkeypatch.setattr(adopted, "_is_read_only_tool", lambda tool: tool.name != "get_device")
    refused = await batch(adopted, entry)
    assert [(i["status"], i["error"]) for i in refused["results"]] == [("blocked", refusal("get_device"))]
    single = await call(adopted.mcp, "invoke_read_tool", {"name": "get_device", "arguments": {"serial": "a"}})
    assert single_read(single)["status"] == "blocked"
    # A router with no such function: the tool's readOnlyHint, as that router's dispatch reads it.
    monkeypatch.delattr(adopted, "_is_read_only_tool")
    assert (await batch(adopted, entry))["results"][0]["status"] == "ok"
    assert (await batch(adopted, [{"name": "reboot_device", "arguments": {"serial": "a"}}]))["results"][0][
        "status"
    ] == "blocked"


def test_the_hints_read_one_by_one_agree_with_the_whole_annotations(router: ModuleType) -> None:
    # The stand-in's gate reads single hints, as the router's own does; the catalog entry dumps them all.
    router._load_all_backends()
    hints = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint", "title")
    for tool in router._tool_index.values():
        whole = _compat.annotations_dict(tool.annotations)
        assert [_compat.annotation_hint(tool.annotations, hint) for hint in hints] == [whole.get(h) for h in hints]
        assert router._is_read_only_tool(tool) is (whole.get("readOnlyHint") is True)
    assert _compat.annotation_hint({"readOnlyHint": True}, "readOnlyHint") is True
    assert _compat.annotation_hint(None, "readOnlyHint") is None


def test_the_catalog_entry_follows_a_reloaded_tool_and_new_annotations(router: ModuleType) -> None:
    hooks = centralmcp.CentralMCPHooks(router)
    first = hooks.centralmcp_find_tool("get_device")
    assert first is not None and first.annotations.get("readOnlyHint") is True
    assert hooks.centralmcp_find_tool("get_device") is first  # the same tool: the same ref, made once
    reloaded = router._tool_index["get_device"].model_copy(update={"annotations": None})
    router._tool_index["get_device"] = reloaded  # the router rebuilt its catalog: a new tool object
    second = hooks.centralmcp_find_tool("get_device")
    assert second is not None and second is not first and second.annotations == {}
    assert hooks.centralmcp_read_gate(second) == refusal("get_device")
    router._tool_backend_names["get_device"] = "moved"  # the same tool object, served elsewhere now
    moved = hooks.centralmcp_find_tool("get_device")
    assert moved is not None and moved.server == "moved"


async def test_a_real_cursor_from_a_clipped_read_resumes_in_a_batch(adopted: ModuleType) -> None:
    single = single_read(
        await call(adopted.mcp, "invoke_read_tool", {"name": "list_devices", "arguments": {"site_id": "hq"}})
    )
    assert single["_response_bounds"]["resumable"] is True and len(single["devices"]) == 200
    first = (await batch(adopted, [{"name": "list_devices", "arguments": {"site_id": "hq"}}]))["results"][0]["result"]
    assert first["devices"] == single["devices"]
    calls = [
        {"id": "from-single", "name": "list_devices", "arguments": {"site_id": "hq"}, "cursor": single["next_cursor"]},
        {"id": "from-batch", "name": "list_devices", "arguments": {"site_id": "hq"}, "cursor": first["next_cursor"]},
        # null arguments are dropped before the digest, as the router's own invoke_read_tool does
        {
            "id": "with-null",
            "name": "list_devices",
            "arguments": {"site_id": "hq", "count": None},
            "cursor": single["next_cursor"],
        },
    ]
    results = (await batch(adopted, calls))["results"]
    for item in results:
        assert item["status"] == "ok"
        assert item["result"]["devices"][0]["serial"] == "SN00200" and item["result"]["_pagination"]["offset"] == 200
    third = results[0]["result"]["next_cursor"]
    last = (await batch(adopted, [{"name": "list_devices", "arguments": {"site_id": "hq"}, "cursor": third}]))[
        "results"
    ][0]["result"]
    assert [d["serial"] for d in last["devices"]] == [
        f"SN{i:05d}" for i in range(400, 450)
    ] and "next_cursor" not in last


async def test_a_cursor_for_other_arguments_or_tampered_is_invalid_and_never_dispatched(
    adopted: ModuleType, tokens: Tokens
) -> None:
    first = (await batch(adopted, [{"name": "list_devices", "arguments": {"site_id": "hq"}}]))["results"][0]["result"]
    before = (tokens.count, len(monitoring_backend.calls))
    cursor = first["next_cursor"]
    calls = [
        {"name": "list_devices", "arguments": {"site_id": "branch"}, "cursor": cursor},
        {"name": "get_device", "arguments": {"serial": "x"}, "cursor": cursor},
        {
            "name": "list_devices",
            "arguments": {"site_id": "hq"},
            "cursor": cursor[:-2] + ("AA" if cursor[-2:] != "AA" else "BB"),
        },
    ]
    results = (await batch(adopted, calls))["results"]
    assert [(i["status"], i["error"]) for i in results] == [
        ("invalid_cursor", "cursor does not match the requested arguments"),
        ("invalid_cursor", "cursor does not match the requested tool"),
        ("invalid_cursor", "cursor signature is invalid (tampered, or the server process restarted)"),
    ]
    assert (tokens.count, len(monitoring_backend.calls)) == before


async def test_exactly_one_router_token_per_backend_call_as_its_single_reads_draw(
    adopted: ModuleType, tokens: Tokens
) -> None:
    for _ in range(2):
        await call(adopted.mcp, "invoke_read_tool", {"name": "get_device", "arguments": {"serial": "a"}})
    assert tokens.count == 2
    calls = [{"name": "get_device", "arguments": {"serial": f"s{i}"}} for i in range(4)]
    calls += [
        {"name": "reboot_device", "arguments": {"serial": "x"}},
        {"name": "nope"},
        {"name": 7},
        {"name": "list_sites"},
    ]
    response = await batch(adopted, calls)
    assert [i["status"] for i in response["results"]] == ["ok"] * 4 + ["blocked", "unknown_tool", "invalid_call", "ok"]
    assert tokens.count == len(monitoring_backend.calls) == 2 + 5


async def test_a_rate_gate_installed_after_adoption_is_drawn_from(router: ModuleType) -> None:
    # The router adopts at import time; its start-up (build_router_middlewares) installs the gate later.
    centralmcp.adopt(router)
    gate = Tokens()
    router.set_dispatch_rate_gate(gate)
    response = await batch(router, [{"name": "get_device", "arguments": {"serial": f"s{i}"}} for i in range(3)])
    assert response["ok"] is True and gate.count == 3


async def test_a_failing_rate_gate_fails_open_as_the_router_decides(
    router: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken() -> None:
        raise ConnectionError("limiter down")

    router.set_dispatch_rate_gate(broken)
    centralmcp.adopt(router)
    with caplog.at_level(logging.WARNING):
        response = await batch(router, [{"name": "get_device", "arguments": {"serial": "a"}}])
    assert response["results"][0]["status"] == "ok"
    assert "dispatch rate gate failed; proceeding" in caplog.text


async def test_a_backend_failure_is_that_entrys_error_in_the_routers_shape(adopted: ModuleType, tokens: Tokens) -> None:
    calls = [
        {"name": "get_radio_stats", "arguments": {"serial": "AP1"}},
        {"name": "get_device", "arguments": {"serial": "AP1"}},
    ]
    response = await batch(adopted, calls)
    failed, fine = response["results"]
    assert failed["status"] == "error" and failed["server"] == "aruba-monitoring"
    # "<Type>: <message>" as the router writes it; SDK 2.x keeps the backend's own text out of the message
    assert re.match(r"\w*ToolError: Error executing tool get_radio_stats\b", failed["error"]), failed["error"]
    assert fine["status"] == "ok" and response["failed_indexes"] == [0]
    assert tokens.count == 2  # the failing call reached its backend, so it drew its token


async def test_a_backend_error_that_quotes_an_argument_has_it_cut_out(adopted: ModuleType) -> None:
    # get_radio_stats raises "radio service unavailable for SERIAL": not a validation error, in no validator's words.
    serial = "AP-qx9SECRET-77"
    response = await batch(adopted, [{"name": "get_radio_stats", "arguments": {"serial": serial}}])
    error = response["results"][0]["error"]
    assert "qx9SECRET" not in error
    if not _compat.SDK_2:  # SDK 1.x passes the tool's own words on (2.x keeps them out): the value is cut out
        assert error.endswith(f"radio service unavailable for {validation.REDACTED}"), error


async def test_bounding_uses_the_routers_bounds_with_the_items_share_of_the_budget(
    adopted: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_RESPONSE_MAX_BYTES", "8192")
    calls = [
        {"name": "list_devices", "arguments": {"site_id": "hq", "count": 150}},
        {"name": "get_device", "arguments": {"serial": "a"}},
    ]
    response = await batch(adopted, calls)
    page = response["results"][0]["result"]
    bounds = page["_response_bounds"]
    entries = [parse_entry(index, entry) for index, entry in enumerate(calls)]
    share = entry_share(entries, 8192, extras={"rate": engine.RATE_PLACEHOLDER})
    assert bounds["reason"] == "byte_budget" and bounds["byte_limit"] == share and bounds["resumable"] is True
    assert len(json.dumps({k: v for k, v in page.items() if k != "_response_bounds"})) <= 4096 + 400
    assert 0 < len(page["devices"]) < 150 and response["results"][1]["result"] == {"serial": "a", "status": "up"}


async def test_a_router_bounding_without_max_bytes_is_called_without_it(
    router: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = router._bound_router_response

    def older(
        result: Any, *, offset: int = 0, enable_cursor: bool = False, tool_name: Any = None, tool_arguments: Any = None
    ) -> Any:
        return own(
            result, offset=offset, enable_cursor=enable_cursor, tool_name=tool_name, tool_arguments=tool_arguments
        )

    monkeypatch.setattr(router, "_bound_router_response", older)
    centralmcp.adopt(router)
    item = (await batch(router, [{"name": "list_devices", "arguments": {"site_id": "hq"}}]))["results"][0]
    assert item["status"] == "ok" and item["result"]["_response_bounds"]["byte_limit"] == 200_000


async def test_an_entry_is_never_bounded_looser_than_a_single_read_of_it(
    adopted: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The router's single-read bound below a one-entry batch's share (about 300,000 bytes): the entry
    # is clipped where invoke_read_tool clips, a page as the same page and a preview at the same length.
    monkeypatch.setenv("CENTRALMCP_ROUTER_RESPONSE_MAX_BYTES", "2048")
    page_args = {"site_id": "hq", "count": 150}
    single_page = single_read(
        await call(adopted.mcp, "invoke_read_tool", {"name": "list_devices", "arguments": page_args})
    )
    entry_page = (await batch(adopted, [{"name": "list_devices", "arguments": page_args}]))["results"][0]["result"]
    assert single_page["_response_bounds"]["byte_limit"] == 2048 and 0 < len(single_page["devices"]) < 150
    assert entry_page["devices"] == single_page["devices"]
    assert entry_page["_response_bounds"] == single_page["_response_bounds"]

    report_args = {"site_id": "hq", "notes_kb": 20}
    single_preview = single_read(
        await call(adopted.mcp, "invoke_read_tool", {"name": "get_webhook_report", "arguments": report_args})
    )
    entry_preview = (await batch(adopted, [{"name": "get_webhook_report", "arguments": report_args}]))["results"][0][
        "result"
    ]
    assert len(single_preview["preview"]) == 2048
    assert entry_preview["_response_bounds"]["byte_limit"] == 2048 and len(entry_preview["preview"]) == 2048


SINGLE_READ_BYTES = "CENTRALMCP_ROUTER_RESPONSE_MAX_BYTES"
PAGES = [{"id": f"p{i}", "name": "list_devices", "arguments": {"site_id": "hq", "count": 150}} for i in range(3)]


def byte_limits(response: dict[str, Any]) -> list[int]:
    return [item["result"]["_response_bounds"]["byte_limit"] for item in response["results"]]


def count_asks(router: ModuleType, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """What the router answers each time it is asked for its single-read bound, in order."""
    asked: list[int] = []
    own = router._response_budget_bytes

    def counted() -> int:
        asked.append(own())
        return asked[-1]

    monkeypatch.setattr(router, "_response_budget_bytes", counted)
    return asked


async def test_a_batch_asks_the_router_for_its_single_read_bound_once_and_the_next_batch_anew(
    adopted: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = count_asks(adopted, monkeypatch)
    monkeypatch.setenv(SINGLE_READ_BYTES, "2048")
    assert byte_limits(await batch(adopted, PAGES)) == [2048] * 3
    monkeypatch.setenv(SINGLE_READ_BYTES, "4096")  # the operator's change applies to the next batch
    assert byte_limits(await batch(adopted, PAGES)) == [4096] * 3
    assert asked == [2048, 4096]  # once per batch, not once per entry
    assert byte_limits(await batch(adopted, PAGES[:1])) == [4096] and asked == [2048, 4096, 4096]


async def test_two_batches_at_once_each_keep_the_bound_the_router_gave_as_it_started(
    adopted: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SINGLE_READ_BYTES, "2048")
    held, release = anyio.Event(), anyio.Event()

    async def hold_the_first_token() -> None:
        if not held.is_set():
            held.set()
            await release.wait()

    adopted.set_dispatch_rate_gate(hold_the_first_token)
    answers: dict[str, dict[str, Any]] = {}

    async def first() -> None:
        answers["first"] = await batch(adopted, PAGES)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(first)
        await held.wait()  # the first batch has started, its first entry not yet dispatched
        monkeypatch.setenv(SINGLE_READ_BYTES, "4096")
        answers["second"] = await batch(adopted, PAGES)
        release.set()
    assert byte_limits(answers["first"]) == [2048] * 3
    assert byte_limits(answers["second"]) == [4096] * 3


@pytest.mark.parametrize("ending", ["completed", "cancelled"])
async def test_a_read_after_a_batch_in_the_task_that_ran_it_asks_the_router_again(
    router: ModuleType, tokens: Tokens, monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    # A batch entry takes the bound its batch read as it started; a read after the batch, in the same
    # task (as the conformance kit dispatches), must not be handed that batch's bound.
    hooks = HostHooks(centralmcp.adopt(router))
    monkeypatch.setenv(SINGLE_READ_BYTES, "2048")
    if ending == "completed":
        assert byte_limits(await batch_tool.run(hooks, PAGES)) == [2048] * 3
    else:
        with anyio.CancelScope() as scope:

            async def cancel_the_batch() -> None:
                scope.cancel()
                await anyio.sleep(0)

            router.set_dispatch_rate_gate(cancel_the_batch)
            await batch_tool.run(hooks, PAGES)
        assert scope.cancelled_caught
    monkeypatch.setenv(SINGLE_READ_BYTES, "4096")
    tool = await hooks.find_tool("list_devices")
    context = CallContext(index=0, call_id="0", in_batch=True)
    answer = await hooks.dispatch_read(tool, PAGES[0]["arguments"], None, 300_000, context)
    assert answer["_response_bounds"]["byte_limit"] == 4096


async def test_a_router_without_a_rate_gate_gets_no_rate_hook_and_says_so(
    router: ModuleType, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delattr(router, "set_dispatch_rate_gate")
    with caplog.at_level(logging.WARNING, logger=centralmcp.__name__):
        pm = centralmcp.adopt(router)
    assert "has no set_dispatch_rate_gate" in caplog.text
    assert pm.hook.centralmcp_acquire_rate_token.get_hookimpls() == []
    assert pm.hook.centralmcp_reserve_rate_tokens.get_hookimpls() == []
    assert (await batch(router, [{"name": "get_device", "arguments": {"serial": "a"}}]))["ok"] is True


async def test_adopt_replaces_the_routers_own_batch_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    router = load_router(monkeypatch, "default")
    own = router.invoke_read_tool_batch
    with caplog.at_level(logging.INFO, logger=centralmcp.__name__):
        centralmcp.adopt(router)
    assert "centralmcp-batch's invoke_read_tool_batch replaces the router's own" in caplog.text
    published = {t.name: t for t in _compat.server_tools(router.mcp)}["invoke_read_tool_batch"]
    assert published.description == batch_tool.DESCRIPTION
    assert published.output_schema == centralmcp.adopted_output_schema()  # not the router's own batch's
    # the module's name is the plugin's tool too, so in-process callers never reach the old batch
    assert router.invoke_read_tool_batch is not own
    direct = await router.invoke_read_tool_batch(None, [{"name": "get_device", "arguments": {"serial": "a"}}])
    assert direct["counts"] == {"total": 1, "succeeded": 1, "failed": 0}
    response = await batch(
        router, [{"name": "get_device", "arguments": {"serial": "a"}}, {"name": "invoke_read_tool_batch"}]
    )
    assert [i["status"] for i in response["results"]] == ["ok", "blocked"]


async def test_in_process_callers_of_the_module_may_pass_pydantic_entries_as_the_routers_own_batch_takes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pydantic import BaseModel

    class BatchCall(BaseModel):  # the shape of the router's own entry model
        name: str
        arguments: dict[str, Any] | None = None
        id: str | None = None
        cursor: str | None = None

    router = load_router(monkeypatch, "default")
    centralmcp.adopt(router)
    response = await router.invoke_read_tool_batch(
        None, [BatchCall(name="get_device", arguments={"serial": "a"}, id="m"), {"name": 3}]
    )
    assert [(i["id"], i["status"]) for i in response["results"]] == [("m", "ok"), ("1", "invalid_call")]
    over_mcp = await batch(router, [{"name": "get_device", "arguments": {"serial": "a"}, "id": "m"}])
    assert over_mcp["results"][0] == response["results"][0]


BROKEN_PLUGINS = {
    "cannot-load": "import centralmcp_no_such_module\n",
    # Found first on the path, it registers its tools after the batch plugin has registered the batch.
    "takes-a-routers-tool-name": (
        "from centralmcp_batch.hookspecs import hookimpl\n\n\n@hookimpl\n"
        "def centralmcp_register_tools(server):\n"
        "    def invoke_read_tool(name: str) -> str:\n        return 'acme'\n\n"
        "    server.add_tool(invoke_read_tool, name='invoke_read_tool', description='acme')\n"
    ),
}


@pytest.mark.parametrize("broken", BROKEN_PLUGINS)
@pytest.mark.parametrize("mode", ["default", "minimal"])
def test_adopt_stopped_by_a_broken_plugin_leaves_the_router_with_the_batch_it_had(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, broken: str, mode: str
) -> None:
    package = fresh_name("acme_broken")
    install_distribution(tmp_path, package, {"acme": package}, modules={"__init__": BROKEN_PLUGINS[broken]})
    monkeypatch.syspath_prepend(str(tmp_path))
    router = load_router(monkeypatch, mode)
    before = {tool.name: tool.description for tool in _compat.server_tools(router.mcp)}
    with pytest.raises(PluginError, match="centralmcp plugin 'acme'"):
        centralmcp.adopt(router)
    # default mode keeps its own batch, minimal mode is left with none: never a half-adopted one
    assert {tool.name: tool.description for tool in _compat.server_tools(router.mcp)} == before


def test_adopt_with_replace_false_refuses_a_router_that_has_its_own_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    router = load_router(monkeypatch, "default")
    with pytest.raises(HostContractError, match="already publishes 'invoke_read_tool_batch' and replace=False"):
        centralmcp.adopt(router, replace=False)
    assert {t.name: t for t in _compat.server_tools(router.mcp)}[
        "invoke_read_tool_batch"
    ].description != batch_tool.DESCRIPTION


def test_adopt_in_minimal_mode_registers_while_plain_install_still_does_not(router: ModuleType) -> None:
    assert not _compat.has_tool(router.mcp, "invoke_read_tool_batch")
    centralmcp.adopt(router)
    assert _compat.has_tool(router.mcp, "invoke_read_tool_batch")
    assert not hasattr(router, "invoke_read_tool_batch")  # the module's own tests read its absence as minimal mode
    from centralmcp_batch import hosting

    other = _compat.new_server("plain")
    hosting.install(other, *centralmcp.host_plugins(router))
    assert not _compat.has_tool(other, "invoke_read_tool_batch")


def documented_adoption() -> str:
    """The code block of the README's "Using it with CentralMCP" section: the change a router makes."""
    section = (TESTS.parent / "README.md").read_text(encoding="utf-8").split("## Using it with CentralMCP", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def write_adopted_router(path: Path, start_up: str = "install_router_middlewares()") -> Path:
    # The stand-in with the documented lines at its end, before a __main__ block as CentralMCP's has:
    # that block installs the middleware chain (``start_up``), after the adoption, then serves.
    main_block = f'if __name__ == "__main__":\n    {start_up}\n    mcp.run()\n'
    path.write_text(
        f"{STANDIN.read_text(encoding='utf-8')}\n\n{documented_adoption()}\n\n{main_block}", encoding="utf-8"
    )
    return path


def published_names(mode: str) -> list[str]:
    """The tools the adopted stand-in router publishes in ``mode``: its own (a wrapper outside minimal
    mode), and in direct mode each backend tool under its own name besides (the wrapper keeps its name)."""
    from standins import config_backend

    names = {"find_tool", "invoke_read_tool", "invoke_read_tool_batch", "invoke_tool"}
    if mode != "minimal":
        names.add("list_sites")
    if mode == "direct":
        names |= {*_compat.tool_names(monitoring_backend.mcp), *_compat.tool_names(config_backend.mcp)}
    return sorted(names)


@pytest.fixture(params=["default", "minimal", "direct"])
def imported_adopted_router(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ModuleType]:
    write_adopted_router(tmp_path / "adopted_tool_router.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("CENTRALMCP_ROUTER_MODE", request.param)
    try:
        yield importlib.import_module("adopted_tool_router")
    finally:
        sys.modules.pop("adopted_tool_router", None)


async def test_the_documented_two_lines_adopt_the_batch_when_the_router_is_imported(
    imported_adopted_router: ModuleType,
) -> None:
    names = sorted(tool.name for tool in _compat.server_tools(imported_adopted_router.mcp))
    assert names == published_names(imported_adopted_router._ROUTER_MODE)
    response = await batch(imported_adopted_router, [{"name": "get_device", "arguments": {"serial": "a"}}])
    assert response["results"][0]["result"] == {"serial": "a", "status": "up"}


@pytest.mark.parametrize("mode", ["default", "minimal", "direct"])
async def test_the_documented_two_lines_work_when_the_router_runs_as_a_script(tmp_path: Path, mode: str) -> None:
    script = write_adopted_router(tmp_path / "tool_router.py")
    env = {
        "PYTHONPATH": str(TESTS),
        "CENTRALMCP_ROUTER_MODE": mode,
    }  # minimal: as CentralMCP's .cursor/mcp.json runs it
    env["CENTRALMCP_ROUTER_RATE_STORE"] = "memory"  # a bucket of its own, not the user's shared SQLite file
    params = _compat.StdioServerParameters(command=sys.executable, args=[str(script)], env=env)
    async with _compat.connect(params) as client:
        names = sorted(tool.name for tool in await client.list_tools())
        assert names == published_names(mode)
        calls = [
            {"name": "list_devices", "arguments": {"site_id": "hq"}},
            {"name": "reboot_device", "arguments": {"serial": "x"}},
        ]
        response = (await client.call_tool("invoke_read_tool_batch", {"calls": calls})).payload
        assert [item["status"] for item in response["results"]] == ["ok", "blocked"]
        cursor = response["results"][0]["result"]["next_cursor"]
        # the batch's cursor is the router's own: its invoke_read_tool resumes it in the same process
        resumed = single_read(
            await client.call_tool(
                "invoke_read_tool", {"name": "list_devices", "arguments": {"site_id": "hq"}, "cursor": cursor}
            )
        )
        assert resumed["devices"][0]["serial"] == "SN00200"


class TestCentralMCPRouterConforms(HostConformance):
    # A paged list, so the kit's max_bytes and cursor checks have a next page to work with.
    read_tool = "list_devices"
    write_tool = "reboot_device"
    read_arguments = {"site_id": "hq"}
    read_server = "aruba-monitoring"

    @pytest.fixture
    def host_plugins(self, monkeypatch: pytest.MonkeyPatch) -> list[object]:
        # The kit installs on a server of its own, so the router's built-in batch does not clash.
        router = load_router(monkeypatch, "default")
        router.set_dispatch_rate_gate(Tokens())
        return centralmcp.host_plugins(router)

    def tokens_drawn(self, host_plugins: list[object]) -> int:
        # The router's own dispatch draws from this gate too: the adapter must not dispatch through it.
        hooks = host_plugins[0]
        assert isinstance(hooks, centralmcp.CentralMCPHooks)
        return int(hooks.router._dispatch_rate_gate.count)


async def test_the_documented_differences_from_the_routers_own_batch(adopted: ModuleType) -> None:
    blank = await batch(
        adopted, [{"id": "   ", "name": "get_device", "arguments": {"serial": "a"}}, {"id": "  ", "name": "list_sites"}]
    )
    assert [(i["id"], i["status"]) for i in blank["results"]] == [("   ", "ok"), ("  ", "ok")]
    clash = await batch(adopted, [{"name": "list_sites"}, {"id": "0", "name": "list_sites"}])
    assert clash == {
        "ok": False,
        "error": "duplicate call id '0': ids must be unique within a batch so results can be correlated",
    }
    nested = (await batch(adopted, [{"name": "invoke_read_tool_batch", "arguments": {"calls": []}}]))["results"][0]
    assert (nested["status"], nested["error"]) == (
        "blocked",
        "invoke_read_tool_batch cannot be called from inside a batch: name a backend tool",
    )


# -- what a preview may show -------------------------------------------------------------------

SECRETISH = r"[A-Za-z _\-]{0,6}(Key|key|KEY|token|Token|secret|Secret|auth|psk|Password)[A-Za-z_]{0,3}"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=24) | st.from_regex(SECRETISH, fullmatch=True))
def test_the_adapter_blanks_exactly_the_keys_the_routers_tokenizer_treats_as_secrets(key: str) -> None:
    assert centralmcp.is_secret_key(key) == is_secret_name(key)


def test_a_preview_is_made_of_the_result_with_every_secret_named_value_blanked() -> None:
    result = {
        "site": "hq",
        "webhooks": [{"url": "u", "signingSecret": "s1"}, ({"API-Key": "k1", "keyring": ["kept"]},)],
        "auth": {"nested": "gone too"},
    }
    assert centralmcp.without_secrets(result) == {
        "site": "hq",
        "webhooks": [{"url": "u", "signingSecret": "******"}, [{"API-Key": "******", "keyring": ["kept"]}]],
        "auth": "******",
    }
