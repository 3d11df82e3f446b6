"""The batch as plain stages: validate, resolve, reserve, dispatch, assemble.

Pure: imports neither pluggy nor mcp. The host's side of the stages (its catalog, gate, cursors,
limiters and dispatch) is a ``Host`` handed in by the caller: the plugin passes
``pipeline.HostPipeline``, which calls the host hooks. So everything here runs on plain data.

1. **validate** every entry (``entries.validate``): the whole-batch rejections, then each entry's checks;
2. **resolve** each valid entry through the host: catalog, read gate, cursor, each its own outcome;
   identical reads (the same tool, arguments and cursor) become one backend call;
3. **reserve** the account's rate for the calls that will reach a backend, in one booking; a call the
   rate cannot start before the time limit is answered at once and books nothing;
4. **dispatch** with bounded concurrency in call order, each call at its slot and under its time
   limit, the whole under the batch's; a batch that ends early gives back the slots it did not reach;
5. **assemble** the items in call order and fit the budget (``items``, ``budget``).

A single read (the reference router's ``invoke_read_tool``) is the same stages with one entry:
``read_one``. Nothing outlives a batch.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, replace
from typing import Any, Protocol

import anyio
import anyio.lowlevel

from . import budget
from .entries import Entry, InvalidCall, ValidCall, parse_entry, validate
from .errors import failed_alone
from .items import assemble, entry_share, make_item, ok_keys_sizes, sized_item
from .models import Outcome, RateBooking, ToolRef
from .settings import BatchSettings

log = logging.getLogger(__name__)

# Once a time limit has passed, the entries it answered are told within this many seconds: a client that
# stopped reading its notifications cannot hold the answer any longer. A cancelled batch's report and the
# slots it gives back get as long, shielded from the cancellation.
REPORT_GRACE = 1.0
# Calls that wait at least this long for the account's rate are announced in a progress notification.
RATE_NOTICE_SECONDS = 0.1


@dataclass(slots=True)
class Ready:
    """A valid entry the host resolved and allowed: what its backend call needs."""

    call: ValidCall
    tool: ToolRef
    resume: Any = None


@dataclass(slots=True)
class BackendCall:
    """One backend call, and the entries it answers: several when they are identical reads."""

    ready: Ready
    indexes: list[int]
    wait: float = 0.0  # seconds from the booking until its slot: how long it waited for the rate
    starts_by: float = math.inf  # seconds from the booking by which it must start on that slot
    holds_slot: bool = False  # booked with the batch, and neither started nor given back yet
    dispatched: bool = False  # sent to the backend


class Host(Protocol):
    """The host's side of each stage (``pipeline.HostPipeline`` over the host hooks)."""

    def resolve(self, call: ValidCall) -> Awaitable[Ready | Outcome]:
        """Catalog, read gate, cursor: the call ready to dispatch, or the outcome that refuses it."""

    def reserve(self, tools: Sequence[ToolRef], within: float) -> Awaitable[RateBooking | None]:
        """Book the account's rate for these calls, in order (None: the host books one call at a time)."""

    def draw_tokens(self, tool: ToolRef, booked_wait: float) -> Awaitable[float]:
        """Take the tokens of the limiters that book one call at a time; the seconds that took."""

    def dispatch(self, ready: Ready, max_bytes: int) -> Awaitable[Outcome]:
        """Call the backend, its answer bounded to ``max_bytes``."""


class Observer(Protocol):
    """Told as entries and the batch finish; every method must swallow its own failures.

    ``batch_started``, ``item_completed``, ``batch_completed`` and ``batch_cancelled`` may be
    ``def`` or ``async def``: an answer that is not None is awaited. ``batch_cancelled`` is told
    instead of ``batch_completed`` when the batch is cancelled, shielded for REPORT_GRACE at most.
    """

    def batch_started(self, total: int) -> Awaitable[None] | None: ...

    def item_completed(self, item: dict[str, Any], seconds: float) -> Awaitable[None] | None: ...

    def batch_completed(self, response: dict[str, Any], seconds: float) -> Awaitable[None] | None: ...

    def batch_cancelled(self, seconds: float) -> Awaitable[None] | None: ...

    async def progress(self, done: int, total: int, message: str) -> None: ...


class QuietObserver:
    def batch_started(self, total: int) -> None:
        return None

    def item_completed(self, item: dict[str, Any], seconds: float) -> None:
        return None

    def batch_completed(self, response: dict[str, Any], seconds: float) -> None:
        return None

    def batch_cancelled(self, seconds: float) -> None:
        return None

    async def progress(self, done: int, total: int, message: str) -> None:
        return None


async def _told(answer: Awaitable[None] | None) -> None:
    if answer is not None:
        await answer


def call_timed_out(timeout: float) -> str:
    return f"TimeoutError: the backend call timed out after {timeout:g}s"


def rate_too_late(next_free: float | None, limit: str, seconds: float) -> str:
    when = "" if next_free is None else f" in {next_free:.1f} s at the soonest,"
    return f"not dispatched: the account's rate would let this call start{when} after the {limit} of {seconds:g}s"


def share_key(ready: Ready) -> tuple[Any, ...] | None:
    """What makes two reads one: the same tool, the same arguments as canonical JSON, the same cursor.

    None for a read that is never shared: its tool says it is not idempotent, or its arguments have
    no canonical form (keys of mixed kinds cannot be sorted).
    """
    if ready.tool.annotations.get("idempotentHint") is False:
        return None
    try:
        arguments = json.dumps(ready.call.arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return None
    return ready.tool.server, ready.tool.name, arguments, ready.call.cursor


class _Batch:
    """One batch in flight: its entries, their items as they are answered, and the rate it drew."""

    def __init__(
        self,
        entries: list[Entry],
        host: Host,
        settings: BatchSettings,
        observer: Observer,
        self_names: frozenset[str] = frozenset(),
        *,
        max_bytes: int | None = None,
        limit: str = "batch time limit",
    ) -> None:
        self.entries, self.host, self.settings = entries, host, settings
        self.observer, self.self_names = observer, self_names
        self.limit, self.fixed_max_bytes = limit, max_bytes
        n = len(entries)
        self.outcomes: list[Outcome | None] = [None] * n
        self.items: list[dict[str, Any] | None] = [None] * n
        self.sizes = [0] * n
        self.keys_sizes = ok_keys_sizes(entries)
        self.max_bytes = max_bytes or 0
        self.shared: list[list[int]] = []
        self.calls: list[BackendCall] = []
        self.caps: dict[tuple[str | None, int], anyio.Semaphore] = {}
        self.told = 0
        self.progress_lock = anyio.Lock()
        self.booked_at = 0.0  # anyio.current_time() as the batch's booking was answered
        self.next_free: float | None = None  # seconds from booked_at until the rate's next free slot
        self.waited = 0.0
        self.books = False  # the host's limiters book the rate (a booking, not a token per call)
        self.give_back_to: Any = None  # the booking's give_back: its slots not reached go back to the rate
        self.told_indexes: set[int] = set()

    # -- the stages ---------------------------------------------------------------------

    async def run(self) -> None:
        started = anyio.current_time()
        deadline = started + self.settings.batch_timeout
        with anyio.CancelScope(deadline=deadline):
            self.calls = await self.resolve_all()
            self.max_bytes = self.fixed_max_bytes or entry_share(
                self.entries, self.settings.response_max_bytes, self.keys_sizes, self.envelope_extras(placeholder=True)
            )
            admitted = await self.reserve(self.calls, deadline)
            await self.tell_answered()
            await self.dispatch_all(admitted)
        await self.answer_the_rest()

    async def resolve_all(self) -> list[BackendCall]:
        """Answer what is refused locally; the rest as backend calls, identical reads as one."""
        calls: list[BackendCall] = []
        by_key: dict[tuple[Any, ...], BackendCall] = {}
        for entry in self.entries:
            if isinstance(entry, InvalidCall):
                item = make_item(entry.index, entry.id, entry.tool, None, Outcome("invalid_call", error=entry.error))
                self.record(entry.index, Outcome("invalid_call", error=entry.error), item)
                continue
            if entry.name in self.self_names:
                error = f"{entry.name} cannot be called from inside a batch: name a backend tool"
                self.record_outcome(entry, Outcome("blocked", error=error))
                continue
            resolved = await self.host.resolve(entry)
            if isinstance(resolved, Outcome):
                self.record_outcome(entry, resolved)
                continue
            key = share_key(resolved) if self.settings.share_identical_reads else None
            same = by_key.get(key) if key is not None else None
            if same is not None:
                same.indexes.append(entry.index)
                continue
            call = BackendCall(resolved, [entry.index])
            calls.append(call)
            if key is not None:
                by_key[key] = call
        self.shared = [call.indexes for call in calls if len(call.indexes) > 1]
        return calls

    async def reserve(self, calls: list[BackendCall], deadline: float) -> list[BackendCall]:
        """Book the rate for ``calls``; answer those it cannot start before ``deadline``; the rest."""
        if not calls:
            return []
        booking = await self.host.reserve([call.ready.tool for call in calls], deadline - anyio.current_time())
        self.booked_at = anyio.current_time()  # the waits count from the answer (see RateBooking)
        if booking is None:  # the host's limiters book one call at a time, as each is dispatched
            return calls
        self.books, self.next_free = True, booking.next_free
        starts_by = booking.starts_by or [math.inf] * len(booking.waits)
        for call, wait, latest in zip(calls, booking.waits, starts_by, strict=False):  # the booked are a prefix
            call.wait, call.starts_by, call.holds_slot = wait, latest, True
        admitted = len(booking.waits)
        for call in calls[admitted:]:
            error = rate_too_late(booking.next_free, self.limit, self.settings.batch_timeout)
            self.record_call(call, Outcome("error", call.ready.tool, error=error))
        self.give_back_to = booking.give_back
        return calls[:admitted]

    async def dispatch_all(self, calls: list[BackendCall]) -> None:
        """Up to ``concurrency`` workers take the calls in call order; the slots not reached are given back."""
        pending = iter(calls)
        try:
            async with anyio.create_task_group() as workers:
                for _ in range(min(self.settings.concurrency, len(calls))):
                    workers.start_soon(_work_through, self.run_call, pending)
        finally:
            await self.give_back_unused(calls)

    async def run_call(self, call: BackendCall) -> None:
        tool = call.ready.tool
        if not await self.wait_for_slot(call):
            return
        began = time.perf_counter()
        async with self.server_cap(tool):
            waited = await self.host.draw_tokens(tool, call.wait)
            self.waited = max(self.waited, call.wait + waited)
            call.dispatched = True
            with anyio.move_on_after(self.settings.call_timeout) as call_limit:
                outcome = await _contained(self.host.dispatch(call.ready, self.max_bytes), tool)
            # An answer that came after a time limit passed (its backend swallowed the cancellation) is late:
            # the call's own limit answers it as timed out; the batch's is raised here, and answered by it.
            await anyio.lowlevel.checkpoint_if_cancelled()
        if call_limit.cancel_called:
            outcome = Outcome("error", tool, error=call_timed_out(self.settings.call_timeout))
        await self.tell_call(call, outcome, time.perf_counter() - began)

    async def wait_for_slot(self, call: BackendCall) -> bool:
        """Sleep until the call's slot; False when it was answered instead (the rate cannot start it in time)."""
        if not self.books:
            return True
        if call.holds_slot:
            await anyio.sleep_until(self.booked_at + call.wait)
        if call.holds_slot:  # (another worker may have given it back meanwhile, below)
            if anyio.current_time() <= self.booked_at + call.starts_by:
                call.holds_slot = False  # its token is spent on this call
                return True
            # The workers fell behind the booking (the backends are slower than the rate): started this late,
            # a call would crowd whoever booked after it. The slots not yet used go back at once, so they delay
            # nobody, this batch's own calls included, and each call left books its slot as it is reached.
            await self.give_back_unused(self.calls)
        return await self.book_on_reaching(call)

    async def book_on_reaching(self, call: BackendCall) -> bool:
        """Book one slot for ``call`` and sleep until it; False when the rate cannot start it in time."""
        tool = call.ready.tool
        booking = await self.host.reserve([tool], anyio.current_effective_deadline() - anyio.current_time())
        if booking is None:
            return True
        if not booking.waits:
            error = rate_too_late(booking.next_free, self.limit, self.settings.batch_timeout)
            await self.tell_call(call, Outcome("error", tool, error=error), 0.0)
            return False
        try:
            await anyio.sleep(booking.waits[0])
        except anyio.get_cancelled_exc_class():
            await _give_back(booking.give_back, [0])
            raise
        call.wait += booking.waits[0]
        return True

    async def give_back_unused(self, calls: list[BackendCall]) -> None:
        """Give back the batch booking's slots that no call has used; ``calls`` are the booking's, in its order."""
        unused = [position for position, call in enumerate(calls) if call.holds_slot]
        for position in unused:
            calls[position].holds_slot = False
        if unused:
            await _give_back(self.give_back_to, unused)

    async def answer_the_rest(self) -> None:
        """Answer each entry the time limit left unanswered; tell what is untold within REPORT_GRACE."""
        dispatched = {index for call in self.calls if call.dispatched for index in call.indexes}
        tools = {index: call.ready.tool for call in self.calls for index in call.indexes}
        seconds = self.settings.batch_timeout
        for index, entry in enumerate(self.entries):
            if self.items[index] is None:
                assert isinstance(entry, ValidCall)
                if index in dispatched:
                    error = f"TimeoutError: cancelled while running: the {self.limit} of {seconds:g}s passed"
                else:
                    error = f"TimeoutError: not dispatched: the {self.limit} of {seconds:g}s passed first"
                self.record_outcome(entry, Outcome("error", tools.get(index), error=error))
        report_by = anyio.current_time() + REPORT_GRACE
        for index in range(len(self.entries)):
            if index not in self.told_indexes:
                await self.tell(index, 0.0, report_by=report_by)

    # -- items and what is told -----------------------------------------------------------

    def record(self, index: int, outcome: Outcome, item: dict[str, Any]) -> None:
        self.outcomes[index] = outcome
        self.items[index], self.sizes[index] = sized_item(item, self.keys_sizes[index])

    def record_outcome(self, entry: ValidCall, outcome: Outcome) -> None:
        server = outcome.tool.server if outcome.tool else None
        self.record(entry.index, outcome, make_item(entry.index, entry.id, entry.name, server, outcome))

    def record_call(self, call: BackendCall, outcome: Outcome) -> None:
        for index in call.indexes:
            entry = self.entries[index]
            assert isinstance(entry, ValidCall)
            self.record_outcome(entry, outcome)

    async def tell_call(self, call: BackendCall, outcome: Outcome, seconds: float) -> None:
        self.record_call(call, outcome)
        for index in call.indexes:
            await self.tell(index, seconds, call.wait)

    async def tell_answered(self) -> None:
        """Announce a wait for the rate, then tell the entries answered so far, in call order."""
        waits = [call.wait for call in self.calls if call.wait >= RATE_NOTICE_SECONDS]
        if waits:
            message = (
                f"waiting for the account's rate: {len(waits)} of {len(self.calls)} backend calls start later, "
                f"the last in {max(waits):.1f} s"
            )
            await self.observer.progress(0, len(self.entries), message)
        for index, item in enumerate(self.items):
            if item is not None and index not in self.told_indexes:
                await self.tell(index, 0.0)

    async def tell(self, index: int, seconds: float, waited: float = 0.0, report_by: float = math.inf) -> None:
        """Tell the observer of the entry's item, and the client of its progress by ``report_by`` at the latest."""
        item = self.items[index]
        assert item is not None
        self.told_indexes.add(index)
        await _told(self.observer.item_completed(item, seconds))
        with anyio.CancelScope(deadline=report_by):
            async with self.progress_lock:  # notifications go out in the order of their counts
                self.told += 1
                await self.observer.progress(self.told, len(self.entries), _progress_message(item, waited))

    def server_cap(self, tool: ToolRef) -> AbstractAsyncContextManager[Any]:
        """The semaphore capping this batch's calls to ``tool``'s server, when its catalog gives one."""
        if not tool.concurrency or tool.concurrency < 1:
            return nullcontext()
        key = (tool.server, tool.concurrency)
        if key not in self.caps:
            self.caps[key] = anyio.Semaphore(tool.concurrency)
        return self.caps[key]

    # -- the response ---------------------------------------------------------------------

    def envelope_extras(self, placeholder: bool = False) -> dict[str, Any]:
        """What the response carries besides the items and their tallies: shared calls and the rate report."""
        extras: dict[str, Any] = {}
        if self.shared:
            extras["shared_calls"] = self.shared
        extras["rate"] = RATE_PLACEHOLDER if placeholder else self.rate_report()
        return extras

    def rate_report(self) -> dict[str, Any]:
        tokens = sum(call.dispatched for call in self.calls)
        free = None
        if self.next_free is not None:
            free = max(0.0, self.next_free - (anyio.current_time() - self.booked_at))
            free = round(min(free, MAX_REPORTED_SECONDS), 3)
        return {"tokens": tokens, "waited_seconds": round(self.waited, 3), "next_free_seconds": free}

    def response(self) -> dict[str, Any]:
        items = [item for item in self.items if item is not None]
        response = {**assemble(items), **self.envelope_extras()}
        return budget.fit(response, self.settings.response_max_bytes, self.sizes)


# The rate report is sized before the batch runs: its numbers are reserved at their widest.
MAX_REPORTED_SECONDS = 999_999.999
RATE_PLACEHOLDER = {"tokens": 25, "waited_seconds": MAX_REPORTED_SECONDS, "next_free_seconds": MAX_REPORTED_SECONDS}


async def _work_through(run_call: Callable[[BackendCall], Awaitable[None]], pending: Iterator[BackendCall]) -> None:
    """A worker: run calls from ``pending`` until none is left."""
    call = None
    try:
        for call in pending:
            await run_call(call)
    except anyio.get_cancelled_exc_class() as exc:
        # anyio's task group keeps the exception that ends a task in a reference cycle: the frames it came
        # through would hold the batch, its entries and their results until the cycle collector runs.
        _drop_frames_below(exc)
        del run_call, pending, call
        raise


def _drop_frames_below(exc: BaseException) -> None:
    """Drop from the traceback of ``exc``, just caught, the frames below the one that caught it (for a
    cancellation only: nobody reads where it found the batch, where an error's traceback is how it is debugged)."""
    if exc.__traceback__ is not None:
        exc.__traceback__.tb_next = None


async def _give_back(give_back: Any, positions: list[int]) -> None:
    """Hand unused slots back to the rate, shielded from a cancellation for REPORT_GRACE at most."""
    if give_back is None:
        return
    with anyio.CancelScope(shield=True), anyio.move_on_after(REPORT_GRACE):
        try:
            await _told(give_back(positions))
        except Exception:  # noqa: BLE001 - slots not given back are rate lost until they pass, no more
            log.warning("the rate limiter could not take back %d unused slots", len(positions), exc_info=True)


async def _contained(dispatching: Awaitable[Outcome], tool: ToolRef) -> Outcome:
    """The dispatch's outcome; whatever it raises fails this call alone, but a cancellation of this task."""
    try:
        return await dispatching
    except BaseException as exc:
        return Outcome("error", tool, error=failed_alone(exc, f"reading {tool.name!r}"))


def _progress_message(item: dict[str, Any], waited: float) -> str:
    label = item["id"] if item["id"] is not None else f"#{item['index']}"
    message = f"{label} ({item['tool'] or '?'}): {item['status']}"
    if waited >= RATE_NOTICE_SECONDS:
        message += f", after {waited:.1f} s waiting for the account's rate"
    return message


async def run_batch(
    calls: Any,
    host: Host,
    settings: BatchSettings,
    observer: Observer | None = None,
    self_names: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """Run one batch; per-entry problems become items, whole-batch problems a rejection."""
    started = time.perf_counter()
    observer = observer or QuietObserver()
    entries = validate(calls)
    if isinstance(entries, str):
        return {"ok": False, "error": entries}
    # Told in the batch's own task, so what an observer starts here (a span) is current in every entry's task.
    await _told(observer.batch_started(len(entries)))
    batch = _Batch(entries, host, settings, observer, self_names)
    try:
        await batch.run()
    except anyio.get_cancelled_exc_class() as exc:  # the client, or the router shutting down: no answer goes out
        with anyio.move_on_after(REPORT_GRACE, shield=True):
            await _told(observer.batch_cancelled(time.perf_counter() - started))
        _drop_frames_below(exc)  # as in _work_through: the caller's task group may keep it in a cycle
        del calls, host, settings, observer, entries, batch
        raise
    response = batch.response()
    await _told(observer.batch_completed(response, time.perf_counter() - started))
    return response


async def read_one(
    name: Any, arguments: Any, cursor: Any, host: Host, settings: BatchSettings, max_bytes: int
) -> Outcome:
    """One read through the same stages as a batch entry, its own time limit over all of them.

    The call time limit bounds the whole read, its wait for the account's rate included.
    """
    raw: dict[str, Any] = {"name": name, "arguments": arguments}
    if cursor is not None:
        raw["cursor"] = cursor
    entry = parse_entry(0, raw)
    if isinstance(entry, InvalidCall):
        return Outcome("invalid_call", error=entry.error)
    single = replace(settings, batch_timeout=settings.call_timeout, concurrency=1)
    batch = _Batch([entry], host, single, QuietObserver(), max_bytes=max_bytes, limit="call time limit")
    await batch.run()
    outcome = batch.outcomes[0]
    assert outcome is not None
    return outcome
