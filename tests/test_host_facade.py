"""The facade's direct calls: the same answers and order as pluggy, and pluggy itself whenever a
wrapper, call monitoring or a change of plugins needs it."""

from __future__ import annotations

from typing import Any

import pytest

from centralmcp_batch import InvalidCursor, ToolRef, hosting
from centralmcp_batch.hookspecs import hookimpl
from centralmcp_batch.host import NO_GATE, HostHooks

pytestmark = pytest.mark.anyio
TOOL = ToolRef("get_x", "srv", {"readOnlyHint": True})


class Catalog:
    def __init__(self, answer: ToolRef | None, log: list[str], label: str) -> None:
        self.answer, self.log, self.label = answer, log, label

    @hookimpl
    def centralmcp_find_tool(self, name: str) -> ToolRef | None:
        self.log.append(self.label)
        return self.answer

    @hookimpl
    def centralmcp_dispatch_read(self, tool: ToolRef) -> Any:
        return {"by": self.label}


class Gate:
    def __init__(self, refusal: str | None) -> None:
        self.refusal = refusal

    @hookimpl
    def centralmcp_read_gate(self, tool: ToolRef) -> str | None:
        return self.refusal


def hooks_over(*plugins: object) -> HostHooks:
    return HostHooks(hosting.plugin_manager(*plugins))


async def test_firstresult_order_matches_pluggy_and_none_passes() -> None:
    log: list[str] = []
    first, second = Catalog(None, log, "first"), Catalog(TOOL, log, "second")
    hooks = hooks_over(first, second)
    expected = hooks.pluginmanager.hook.centralmcp_find_tool(name="get_x")
    log.clear()
    assert await hooks.find_tool("get_x") == expected == TOOL
    assert log == ["second"]  # last registered is asked first, and its answer ends the call
    second.answer = None
    log.clear()
    assert await hooks.find_tool("get_x") is None and log == ["second", "first"]


async def test_a_plugin_registered_after_the_first_call_is_heard() -> None:
    hooks = hooks_over(Catalog(TOOL, [], "host"), Gate(None))
    assert await hooks.read_gate(TOOL) is None
    late = Gate("refused late")
    hooks.pluginmanager.register(late)
    assert await hooks.read_gate(TOOL) == "refused late"
    hooks.pluginmanager.unregister(late)
    assert await hooks.read_gate(TOOL) is None


async def test_unregistering_the_only_gate_refuses_every_read() -> None:
    gate = Gate(None)
    hooks = hooks_over(Catalog(TOOL, [], "host"), gate)
    assert await hooks.read_gate(TOOL) is None
    hooks.pluginmanager.unregister(gate)
    assert await hooks.read_gate(TOOL) == NO_GATE


async def test_a_wrapper_sees_every_call() -> None:
    seen: list[str] = []

    class Wrapper:
        @hookimpl(wrapper=True)
        def centralmcp_dispatch_read(self, tool: ToolRef):  # type: ignore[no-untyped-def]
            seen.append(tool.name)
            answer = yield
            return {**answer, "wrapped": True}

    hooks = hooks_over(Catalog(TOOL, [], "host"), Gate(None))
    context: Any = None
    assert await hooks.dispatch_read(TOOL, {}, None, 1024, context) == {"by": "host"}
    hooks.pluginmanager.register(Wrapper())
    assert await hooks.dispatch_read(TOOL, {}, None, 1024, context) == {"by": "host", "wrapped": True}
    assert seen == ["get_x"]


async def test_call_monitoring_switched_on_later_sees_every_call() -> None:
    hooks = hooks_over(Catalog(TOOL, [], "host"), Gate(None))
    assert await hooks.find_tool("get_x") == TOOL  # the direct plan is built and cached
    called: list[str] = []
    undo = hooks.pluginmanager.add_hookcall_monitoring(
        lambda name, impls, kwargs: called.append(name), lambda *args: None
    )
    assert await hooks.find_tool("get_x") == TOOL and await hooks.read_gate(TOOL) is None
    assert called == ["centralmcp_find_tool", "centralmcp_read_gate"]
    undo()
    assert await hooks.find_tool("get_x") == TOOL and len(called) == 2


async def test_a_gate_that_is_only_a_wrapper_refuses_every_read() -> None:
    class WrapperOnly:
        @hookimpl(wrapper=True)
        def centralmcp_read_gate(self, tool: ToolRef):  # type: ignore[no-untyped-def]
            return (yield)

    hooks = hooks_over(Catalog(TOOL, [], "host"), WrapperOnly())
    assert await hooks.read_gate(TOOL) == NO_GATE  # it wraps nothing: no implementation answers


async def test_a_batch_keeps_the_hooks_it_started_with() -> None:
    hooks = hooks_over(Catalog(TOOL, [], "host"), Gate(None))
    calls = hooks.calls()
    assert calls is hooks.calls()  # unchanged plugins: the same calls, nothing rebuilt
    hooks.pluginmanager.register(Gate("refused late"))
    assert calls.read_gate(TOOL) is None  # the batch that started before the plugin came keeps its hooks
    assert await hooks.read_gate(TOOL) == "refused late"  # the next one hears it


async def test_a_def_hook_answers_without_a_coroutine_and_an_async_one_is_awaited() -> None:
    class AsyncCatalog:
        @hookimpl
        async def centralmcp_find_tool(self, name: str) -> ToolRef | None:
            return TOOL

    plain = hooks_over(Catalog(TOOL, [], "host"), Gate(None)).calls()
    assert plain.find_tool("get_x") is TOOL  # the implementation itself: its answer as it is
    awaited = hooks_over(AsyncCatalog(), Gate(None)).calls()
    answer = awaited.find_tool("get_x")
    assert answer is not TOOL and await answer == TOOL


class Listener:
    """An observer that records what it hears, and may answer False as a batch starts."""

    def __init__(self, answer: Any, heard: list[str], label: str) -> None:
        self.answer, self.heard, self.label = answer, heard, label

    @hookimpl
    def centralmcp_batch_started(self, total: int) -> Any:
        self.heard.append(f"{self.label}: started")
        return self.answer

    @hookimpl
    def centralmcp_rate_token_waited(self, tool: ToolRef, seconds: float) -> None:
        self.heard.append(f"{self.label}: token")

    @hookimpl
    def centralmcp_batch_item_completed(self, item: Any, seconds: float) -> None:
        self.heard.append(f"{self.label}: item")

    @hookimpl
    def centralmcp_batch_completed(self, response: Any, seconds: float) -> None:
        self.heard.append(f"{self.label}: completed")


class AsyncQuiet(Listener):
    @hookimpl
    async def centralmcp_batch_started(self, total: int) -> Any:  # type: ignore[override]
        self.heard.append(f"{self.label}: started")
        return False


@pytest.mark.parametrize("quiet_kind", [Listener, AsyncQuiet], ids=["def", "async def"])
async def test_an_observer_that_answers_false_hears_nothing_more_of_that_batch(quiet_kind: type) -> None:
    heard: list[str] = []
    quiet = quiet_kind(False, heard, "quiet")
    hooks = hooks_over(Catalog(TOOL, [], "host"), Gate(None), Listener(None, heard, "loud"), quiet)
    batch = hooks.calls().for_batch()
    told = batch.batch_started(2)
    if told is not None:
        await told
    for told in (
        batch.rate_token_waited(TOOL, 0.0),
        batch.batch_item_completed({}, 0.0),
        batch.batch_completed({}, 0.0),
    ):
        assert told is None
    assert heard == ["quiet: started", "loud: started", "loud: token", "loud: item", "loud: completed"]
    assert batch.hears_items  # the loud one still listens
    heard.clear()
    next_batch = hooks.calls().for_batch()  # the next batch asks again, and the shared calls were not narrowed
    assert next_batch.hears_tokens and hooks.calls().hears_tokens
    next_batch.rate_token_waited(TOOL, 0.0)
    assert sorted(heard) == ["loud: token", "quiet: token"]


async def test_a_batch_hears_items_only_while_an_item_observer_still_listens() -> None:
    # The engine asks hears_items once the batch has started, and tells no item when it is False.
    heard: list[str] = []
    hooks = hooks_over(Catalog(TOOL, [], "host"), Gate(None), Listener(False, heard, "quiet"))
    assert hooks.calls().hears_items
    batch = hooks.calls().for_batch()
    assert batch.hears_items
    told = batch.batch_started(1)
    assert told is None
    assert not batch.hears_items
    assert hooks.calls().hears_items and hooks.calls().for_batch().hears_items  # the next batch asks again
    assert not hooks_over(Catalog(TOOL, [], "host"), Gate(None)).calls().hears_items  # no item observer at all


async def test_observers_answering_false_or_not_batch_after_batch_each_hear_exactly_their_batches() -> None:
    # What a batch narrows is remembered for the next batches; whoever answers otherwise next time hears it all.
    heard: list[str] = []
    first, second = Listener(False, heard, "first"), Listener(False, heard, "second")
    hooks = hooks_over(Catalog(TOOL, [], "host"), Gate(None), first, Listener(None, heard, "loud"), second)
    for answers in [(False, False), (False, False), (None, False), (False, None), (None, None), (False, False)]:
        first.answer, second.answer = answers
        heard.clear()
        batch = hooks.calls().for_batch()
        assert batch.batch_started(1) is None
        batch.rate_token_waited(TOOL, 0.0)
        batch.batch_completed({}, 0.0)
        listening = ["loud"] + [
            label for label, answer in zip(("first", "second"), answers, strict=True) if answer is None
        ]
        assert sorted(heard) == sorted(
            [f"{label}: started" for label in ("first", "loud", "second")]
            + [f"{label}: {what}" for label in listening for what in ("token", "completed")]
        ), answers
        assert batch.hears_tokens


class DefaultedGate:
    """A gate whose argument has a default: pluggy decides what it is given, so the facade lets it."""

    @hookimpl
    def centralmcp_read_gate(self, tool: ToolRef | None = None) -> str | None:
        return None if tool is not None and tool.read_only else "refused: not read-only"


async def test_an_implementation_with_a_defaulted_argument_gets_what_pluggy_gives_it() -> None:
    writer = ToolRef("set_x", "srv", {"readOnlyHint": False})
    hooks = hooks_over(Catalog(writer, [], "host"), DefaultedGate())
    for tool in (writer, TOOL):
        answers = hooks.pluginmanager.hook.centralmcp_read_gate(tool=tool)
        assert await hooks.read_gate(tool) == (answers[0] if answers else None)
    # whatever the pluggy release gives it, the write is never allowed
    assert await hooks.read_gate(writer) == "refused: not read-only"

    heard: list[float] = []

    class DefaultedObserver:
        @hookimpl
        def centralmcp_batch_item_completed(self, item: Any, seconds: float = -1.0) -> None:
            heard.append(seconds)

    hooks.pluginmanager.register(DefaultedObserver())
    hooks.pluginmanager.hook.centralmcp_batch_item_completed(item={}, seconds=0.5)
    by_pluggy = heard.pop()
    await hooks.batch_item_completed({}, 0.5)
    assert heard == [by_pluggy]


async def test_call_monitoring_sees_the_observers_too() -> None:
    heard: list[str] = []
    hooks = hooks_over(Catalog(TOOL, [], "host"), Gate(None), Listener(None, heard, "one"))
    called: list[str] = []
    hooks.pluginmanager.add_hookcall_monitoring(lambda name, impls, kwargs: called.append(name), lambda *a: None)
    batch = hooks.calls().for_batch()
    for told in (batch.batch_started(1), batch.batch_item_completed({}, 0.0), batch.batch_completed({}, 0.0)):
        assert told is None
    assert heard == ["one: started", "one: item", "one: completed"]
    assert called == ["centralmcp_batch_started", "centralmcp_batch_item_completed", "centralmcp_batch_completed"]


async def test_a_limiter_that_raises_costs_no_other_limiter_its_token() -> None:
    drawn: list[str] = []

    class Bucket:
        @hookimpl
        async def centralmcp_acquire_rate_token(self, tool: ToolRef) -> None:
            drawn.append(tool.name)

    class Broken:
        @hookimpl(trylast=True)  # asked after the bucket, which has already handed over its coroutine
        def centralmcp_acquire_rate_token(self, tool: ToolRef) -> None:
            raise RuntimeError("limiter down")

    hooks = hooks_over(Catalog(TOOL, [], "host"), Gate(None), Bucket(), Broken())
    await hooks.acquire_rate_token(TOOL)
    assert drawn == ["get_x"]


async def test_a_resume_hook_that_is_only_a_wrapper_refuses_every_cursor() -> None:
    class WrapperOnly:
        @hookimpl(wrapper=True)
        def centralmcp_resume_cursor(self, tool: ToolRef):  # type: ignore[no-untyped-def]
            return (yield)

    hooks = hooks_over(Catalog(TOOL, [], "host"), Gate(None), WrapperOnly())
    with pytest.raises(InvalidCursor):
        await hooks.resume_cursor(TOOL, {}, "cursor@1")
