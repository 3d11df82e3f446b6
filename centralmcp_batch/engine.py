"""The batch: whole-batch checks, per-entry validation, bounded fan-out, ordering and counts.

Pure: imports neither pluggy nor mcp. One entry's read is a ``Reader`` handed in by the
caller (the plugin passes the host pipeline), so everything here runs on plain data.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import re
import time
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterator, Sequence
from contextlib import AbstractAsyncContextManager as AsyncContextManager
from contextlib import nullcontext
from dataclasses import dataclass
from types import CoroutineType
from typing import Any, Protocol, cast

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup

from . import budget
from .errors import sole_cause, text_of
from .models import (
    FAILED_STATUSES,
    MAX_ARGUMENT_BYTES,
    MAX_ARGUMENT_DEPTH,
    MAX_CALLS,
    MAX_ID_CHARS,
    MAX_NAME_CHARS,
    BatchCall,
    Outcome,
    ToolRef,
)
from .settings import BatchSettings

log = logging.getLogger(__name__)

ERROR_CHARS = 500
# The keys of a call object, as the published input schema states them (it allows no others).
ENTRY_KEYS = frozenset(BatchCall.model_fields)
# How much of an unknown key an invalid_call item shows.
UNKNOWN_KEY_CHARS = 40
MIN_SHARE = 1024
# Room kept in each entry's share for its server's name, which is not known until the entry is
# resolved: longer names can cost the last results their place in a response filled to the brim.
SERVER_NAME_RESERVE = 64
# Levels of objects and arrays a result may nest. Both SDK lines write a response with pydantic's
# serializer, which refuses a value about 250 levels deep and fails the whole answer with it; the
# json module measuring the budget goes on as deep as Python's C recursion limit (about 1,000
# levels, 10,000 on Python 3.13), so it cannot be the judge.
MAX_RESULT_DEPTH = 200
# The batch's other workers start only once waiting is what takes its time: when one entry has
# waited RAMP_WAIT, or when the entries' waits add up to RAMP_WAIT and to half the time the batch
# has run. Backends that answer at once or nearly (in memory, a cache, a worker thread's hop while
# the router's own work takes the time) run one entry at a time, which costs least and holds one
# raw answer at a time; slower ones get the full concurrency at most this much late, once per
# batch. A worker thread's hop took 0.1-0.5 ms on the benchmark machine, and now and then over 1 ms.
RAMP_WAIT = 0.002
# Once the batch time limit has passed, the progress of the entries it answered is told within this
# many seconds: a client that stopped reading its notifications cannot hold the answer any longer.
REPORT_GRACE = 1.0
# After this many batches of a host in a row in which no entry waited, its next batch opens no task
# group until an entry waits (see ``WaitForecast``).
QUIET_BATCHES = 4


# Plain slotted classes, not frozen ones: a frozen dataclass sets each field through
# object.__setattr__, a third of a microsecond per entry for nothing. Nothing changes them.
@dataclass(slots=True)
class ValidCall:
    index: int
    id: str
    name: str
    arguments: dict[str, Any]
    cursor: str | None


@dataclass(slots=True)
class InvalidCall:
    index: int
    id: str | None
    tool: str | None
    error: str


Entry = ValidCall | InvalidCall


class Guards:
    """What the engine lends one entry's read: the per-server cap and the call time limit.

    The reader holds the tool's server cap (``server_cap``, or ``server_slot`` as a context
    manager) around the rate token and the dispatch, sends the backend call through ``dispatch``
    and then asks ``dispatch_ended``, so the engine knows whether an entry reached its backend
    when the batch deadline passes.

    What costs in a call time limit is a cancel scope per call (entering and leaving one was a
    sixth of a zero-latency entry's cost) and arming its timer. So a batch's worker lends each
    entry it runs its own scope, ``scope``, and the engine's driver (``_driven``) sets its
    deadline only once the call has started waiting on something, counted from the call's
    start: a call that never waits (an in-memory backend, a cache) cannot be cancelled anyway.
    ``dispatch_ended`` lifts it. When the deadline passes, the cancellation ends the call and
    unwinds the entry to its worker, which answers it as timed out (``_Run.work_through``).
    Outside a worker (a single read) the call gets a scope of its own.
    """

    __slots__ = (
        "_armed",
        "_caps",
        "_late",
        "_started",
        "call_timeout",
        "calling",
        "dispatched",
        "resting",
        "scope",
        "tool",
    )

    def __init__(self, call_timeout: float, server_caps: dict[Any, anyio.Semaphore] | None = None) -> None:
        self.call_timeout = call_timeout
        self.dispatched = False
        self._caps = server_caps if server_caps is not None else {}
        self.scope: anyio.CancelScope | None = None  # the worker's scope, lent for the call time limit
        self.resting = math.inf  # the scope's deadline between calls: its worker's batch deadline, if any
        self.tool: ToolRef | None = None  # the tool being called, once dispatched
        self.calling = False  # between dispatch() and dispatch_ended()
        self._armed = False
        self._late = False
        self._started = 0.0

    def server_slot(self, tool: ToolRef) -> AsyncContextManager[Any]:
        # Plain context managers, not generator-based ones: this is on every entry's path.
        cap = self.server_cap(tool)
        return nullcontext() if cap is None else cap

    def dispatching(self) -> anyio.CancelScope:
        """Mark the entry as sent to its backend; enter the scope returned to bound that call by the call timeout."""
        self.dispatched = True
        return anyio.move_on_after(self.call_timeout)

    def dispatch(self, call: Coroutine[Any, Any, Any], tool: ToolRef | None = None) -> Awaitable[Any]:
        """Mark the entry as sent to ``tool``'s backend; await what this returns, then ask ``dispatch_ended()``.

        The same bound as awaiting ``call`` inside ``dispatching()``, cheaper (see the class).
        """
        self.dispatched, self.calling, self.tool = True, True, tool
        self._started = time.perf_counter()
        if self.scope is None:
            return _in_own_scope(call if type(call) is CoroutineType else _awaiting(call), self)
        return call

    def answered(self, answer: Any) -> Any:
        """Mark the entry as sent to its backend, whose dispatch answered without waiting: ``answer``."""
        self.dispatched, self.calling = True, True
        return answer

    def arm(self) -> None:
        """The entry waits: while its call runs, the call time limit counts from the call's start."""
        if self.calling and not self._armed and self.scope is not None:
            self._armed = True
            deadline = anyio.current_time() + self.call_timeout - (time.perf_counter() - self._started)
            if deadline < self.resting:  # a batch deadline sooner than the call's stays: it is the limit that passes
                self.scope.deadline = deadline

    def dispatch_ended(self) -> bool:
        """Lift the call's time limit; True when it passed (an answer that came anyway came too late)."""
        self.calling = False
        scope = self.scope
        if self._armed and scope is not None:
            self._armed = False
            self._late = self._late or scope.cancel_called
            if not scope.cancel_called and scope.deadline != self.resting:
                scope.deadline = self.resting
        return self._late

    def server_cap(self, tool: ToolRef) -> anyio.Semaphore | None:
        """The semaphore capping calls to ``tool``'s server, or None when it has no cap of its own."""
        if not tool.concurrency or tool.concurrency < 1:
            return None
        key = (tool.server, tool.concurrency)
        if key not in self._caps:
            self._caps[key] = anyio.Semaphore(tool.concurrency)
        return self._caps[key]


async def _awaiting(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


@types.coroutine
def _in_own_scope(call: Coroutine[Any, Any, Any], guards: Guards) -> Generator[Any, Any, Any]:
    """Await ``call`` under the call time limit in a cancel scope of its own (a read outside a batch)."""
    with anyio.CancelScope() as scope:
        guards.scope = scope
        try:
            return (yield from _driven(call, guards))
        finally:  # the scope goes with this call: whether it was cancelled is kept for dispatch_ended
            guards._late = scope.cancel_called
            guards.scope = None
    guards._late = True  # only reached when the scope caught its own deadline
    return None


@types.coroutine
def _driven(reading: Coroutine[Any, Any, Any], guards: Guards, run: _Run | None = None) -> Generator[Any, Any, Any]:
    """Await ``reading``, as ``await`` would; each time it waits, arm ``guards``' call time limit (see
    ``Guards``), and tell ``run`` (a batch that may still start workers) how long the waits take.

    What the reading waits on goes up to the task, and what the task answers (values, exceptions,
    cancellation) goes down to the reading. A reading that swallowed a plain ``task.cancel()`` is
    not answered: the cancellation goes on up once the reading is over (see ``_swallowed_cancel``).
    """
    try:
        waiting_on = reading.send(None)
    except StopIteration as done:
        return done.value
    requests = _cancel_requests()  # counted before the first wait: only a wait lets a cancellation in
    try:
        answer = yield from _waited(reading, waiting_on, guards, run)
    except BaseException as exc:
        if isinstance(exc, GeneratorExit | asyncio.CancelledError) or not _swallowed_cancel(requests):
            raise
        # A failure after a swallowed cancellation: the cancellation is raised below, out of this
        # handler, so that it does not carry the failure and its frames along.
    else:
        if not _swallowed_cancel(requests):
            return answer
    raise asyncio.CancelledError("the task was cancelled while a read waited, and the read went on")


def _waited(
    reading: Coroutine[Any, Any, Any], waiting_on: Any, guards: Guards, run: _Run | None
) -> Generator[Any, Any, Any]:
    """The rest of ``_driven``, once ``reading`` waits on ``waiting_on``."""
    watching = run if run is not None and run.helpers_wanted > 0 else None
    if watching is not None:
        watching.entry_waits()
    while True:
        if guards.calling:
            guards.arm()
        if watching is not None:
            suspended = time.monotonic()
        try:
            answer = yield waiting_on
        except GeneratorExit:  # this await is being closed: close the reading too, as ``await`` does
            reading.close()
            raise
        except BaseException as exc:  # thrown into the task (a cancellation): the reading's to handle
            if watching is not None and not watching.resumed(suspended):
                watching = None
            try:
                waiting_on = reading.throw(exc)
            except StopIteration as done:
                return done.value
        else:
            if watching is not None and not watching.resumed(suspended):
                watching = None
            try:
                waiting_on = reading.send(answer)
            except StopIteration as done:
                return done.value


def _swallowed_cancel(requests: int | None) -> bool:
    """Whether a plain ``task.cancel()`` reached a reading that is over, and the reading swallowed it.

    ``requests`` is ``_cancel_requests()`` from before the reading waited. anyio delivers its own
    cancellations again at the next checkpoint while their scope is cancelled, and asyncio.timeout
    takes its request back as it turns it into TimeoutError; a plain ``task.cancel()`` is delivered
    once, so a request left over is one the reading swallowed, and the task must still stop.
    """
    if requests is None:
        return False
    now = _cancel_requests()
    return now is not None and now > requests and anyio.current_effective_deadline() != -math.inf


class Reader(Protocol):
    def __call__(self, call: ValidCall, max_bytes: int, guards: Guards) -> Awaitable[Outcome]: ...


class Observer(Protocol):
    """Told as entries and the batch finish; every method must swallow its own failures.

    ``batch_started``, ``item_completed``, ``batch_completed`` and ``batch_cancelled`` may be
    ``def`` or ``async def``: the engine awaits an answer that is not None, so an observer with
    nothing to wait for costs no coroutine per entry. ``batch_cancelled`` is told instead of
    ``batch_completed`` when the batch is cancelled, shielded for REPORT_GRACE at most.
    """

    def batch_started(self, total: int) -> Awaitable[None] | None: ...

    def item_completed(self, item: dict[str, Any], seconds: float) -> Awaitable[None] | None: ...

    def batch_completed(self, response: dict[str, Any], seconds: float) -> Awaitable[None] | None: ...

    def batch_cancelled(self, seconds: float) -> Awaitable[None] | None: ...

    async def progress(self, done: int, total: int, message: str) -> None: ...


# An observer may say ``reports_progress = False`` (nobody to tell), or keep QuietObserver's own
# ``progress``: the engine then skips the progress lock and the call on every entry. One that says
# ``hears_items = False`` (read once the batch has started) is not told of each entry either: telling
# an observer with nobody behind it was 2.8 k instructions of a zero-latency entry's 250 k.


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


# -- what a failing call may raise ----------------------------------------------------


def must_propagate(exc: BaseException) -> bool:
    """True when ``exc`` must go on up: this task is being cancelled, or its coroutine closed.

    A time limit or the client cancelling is a cancellation of the task and must stop it. A
    backend can also raise the cancellation exception itself (say after awaiting a future that
    something else cancelled) while nobody cancelled this task: that is its call failing, as is
    any other ``BaseException`` (``SystemExit`` from a backend that parses input with argparse).
    """
    if isinstance(exc, GeneratorExit):
        return True
    if not isinstance(exc, anyio.get_cancelled_exc_class()):
        return False
    if anyio.current_effective_deadline() == -math.inf:  # an enclosing cancel scope was cancelled
        return True
    return _cancel_requested()


def _cancel_requested() -> bool:
    """Whether the current asyncio task has a cancel request pending (a plain ``task.cancel()``).

    Not on asyncio, trio's Cancelled cannot be raised by hand, so it is real; Python 3.10 cannot
    tell, so it is taken for real there too.
    """
    requests = _cancel_requests()
    return requests is None or requests > 0


def _cancel_requests() -> int | None:
    """asyncio's count of cancel requests pending on the current task (``Task.cancelling()``); None
    where none is kept: not on asyncio, or on Python 3.10."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no asyncio loop running: trio
        return None
    cancelling = getattr(task, "cancelling", None)
    return None if cancelling is None else cast(int, cancelling())


def call_timed_out(timeout: float) -> str:
    return f"TimeoutError: the backend call timed out after {timeout:g}s"


def describe(exc: BaseException) -> str:
    """An exception as an item's error: ``"ExcType: message"`` (just ``ExcType`` with no message)."""
    # A task group in the host's dispatch wraps the error it lets out, and the group's own text
    # ("unhandled errors in a TaskGroup") would hide the backend's; a group of several stays as it is.
    exc = sole_cause(exc)
    name = type(exc).__name__
    if isinstance(exc, asyncio.CancelledError):  # described only once must_propagate said it was not real
        return f"{name}: raised by the call itself; no time limit passed and the client did not cancel"
    text = text_of(exc)
    return f"{name}: {text}" if text else name


# -- whole-batch and per-entry checks -------------------------------------------------


def check_batch(calls: Any) -> str | None:
    if not isinstance(calls, list):
        return "calls must be a list"
    if not calls:
        return "calls must contain at least one entry"
    if len(calls) > MAX_CALLS:
        return f"calls has {len(calls)} entries, exceeding the {MAX_CALLS}-entry bound"
    return None


def parse_entries(calls: list[Any]) -> list[Entry]:
    """``parse_entry`` for each call, the arguments' bounds told for the whole batch at once.

    The common batch's arguments all fit the bounds together: one encoding of them all tells it,
    where one encoding per entry was 2 % of a zero-latency entry's bytecode. Otherwise each entry's
    own arguments are measured, and the other checks have passed: the outcome is ``parse_entry``'s.
    """
    entries = [parse_entry(index, raw, measure_arguments=False) for index, raw in enumerate(calls)]
    # Each one's encoding is a part of the list's, so none is larger, and the list is a level above the deepest.
    given = [entry.arguments for entry in entries if type(entry) is ValidCall]
    if _encoding_problem(given, wrapping=1) is None:
        return entries
    return [_with_arguments_measured(entry) for entry in entries]


def _with_arguments_measured(entry: Entry) -> Entry:
    if not isinstance(entry, ValidCall):
        return entry
    problem = _arguments_problem(entry.arguments)
    return entry if problem is None else InvalidCall(entry.index, entry.id, entry.name, problem)


def parse_entry(index: int, raw: Any, *, measure_arguments: bool = True) -> Entry:
    """Validate one entry in the documented order; the first failure wins.

    ``measure_arguments=False`` leaves out only the arguments' size and nesting (see ``parse_entries``).
    """
    if type(raw) is dict:  # the common entry, told valid in one pass; anything else is checked in order below
        call_id, name, arguments, cursor = raw.get("id"), raw.get("name"), raw.get("arguments"), raw.get("cursor")
        if call_id is None:
            call_id = str(index)
        if (
            type(call_id) is str
            and 0 < len(call_id) <= MAX_ID_CHARS
            and call_id.isascii()
            and type(name) is str
            and 0 < len(name) <= MAX_NAME_CHARS
            and name.isascii()
            and (cursor is None or type(cursor) is str)
            and raw.keys() <= ENTRY_KEYS
            and (
                _arguments_problem(arguments) is None
                if measure_arguments
                else arguments is None or type(arguments) is dict
            )
        ):
            return ValidCall(index, call_id, name, arguments or {}, cursor)
    try:
        return _parse_in_order(index, raw)
    except Exception as exc:  # a mapping of an in-process caller's whose own methods raise: that entry is invalid
        return InvalidCall(index, str(index), None, f"call at index {index} could not be read: {type(exc).__name__}")


def _parse_in_order(index: int, raw: Any) -> Entry:
    if not isinstance(raw, dict):
        return InvalidCall(index, str(index), None, f"call at index {index} must be an object")
    call_id = raw.get("id")
    if call_id is None:
        call_id = str(index)
    name = raw.get("name")
    echo = name if isinstance(name, str) and len(name) <= MAX_NAME_CHARS and is_utf8(name) else None
    if not isinstance(call_id, str) or not call_id:
        return InvalidCall(index, None, echo, "id must be a non-empty string")
    if not is_utf8(call_id):
        return InvalidCall(index, None, echo, "id must be valid Unicode text")
    if len(call_id) > MAX_ID_CHARS:
        return InvalidCall(index, None, echo, f"id must be at most {MAX_ID_CHARS} characters")
    problem = _name_problem(name) or _arguments_problem(raw.get("arguments"))
    if problem is None and raw.get("cursor") is not None and not isinstance(raw.get("cursor"), str):
        problem = "cursor must be a string"
    if problem is None:
        problem = _unknown_key_problem(raw)
    if problem is not None:
        return InvalidCall(index, call_id, echo, problem)
    return ValidCall(index, call_id, cast(str, name), raw.get("arguments") or {}, raw.get("cursor"))  # checked above


def _unknown_key_problem(entry: dict[Any, Any]) -> str | None:
    """A key the call object does not have: a misspelled ``argumnts`` would otherwise run the call with ``{}``.

    The key is named (cut, and escaped by ``repr``) so the typo can be found; it is the entry's own key,
    never a value, and no middleware puts a secret back into a key.
    """
    unknown = next((key for key in entry if key not in ENTRY_KEYS), None)
    if unknown is None:
        return None
    shown = repr(unknown)
    if len(shown) > UNKNOWN_KEY_CHARS:
        shown = shown[: UNKNOWN_KEY_CHARS - 3] + "..."
    return f"unknown key {shown}: a call has only name, arguments, id and cursor"


def _name_problem(name: Any) -> str | None:
    if not isinstance(name, str) or not name:
        return "name must be a non-empty string"
    if len(name) > MAX_NAME_CHARS:
        return f"name must be at most {MAX_NAME_CHARS} characters"
    if not is_utf8(name):
        return "name must be valid Unicode text"
    return None


def is_utf8(text: str) -> bool:
    """False for text with lone surrogates, which no JSON on the wire can carry."""
    if text.isascii():  # the common case, told without encoding a copy
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _arguments_problem(arguments: Any) -> str | None:
    if arguments is None:
        return None
    if not isinstance(arguments, dict):
        return "arguments must be an object"
    return _encoding_problem(arguments)


def _encoding_problem(value: Any, wrapping: int = 0) -> str | None:
    """The first of the arguments' bounds ``value`` breaks as JSON; its outer ``wrapping`` levels are
    containers around arguments (``parse_entries``' list of them), not the arguments' own."""
    try:
        text = budget.dumps(value)
        encoded_bytes = budget.text_size(text)  # a lone surrogate fails here: UnicodeEncodeError, a ValueError
    except Exception:  # TypeError, ValueError, RecursionError, or whatever a value's own methods raise
        return "arguments must be JSON-serializable"
    if encoded_bytes > MAX_ARGUMENT_BYTES:
        return f"arguments must be at most {MAX_ARGUMENT_BYTES} bytes as JSON"
    if nests_deeper(text, MAX_ARGUMENT_DEPTH + wrapping):
        return f"arguments must be nested at most {MAX_ARGUMENT_DEPTH} levels deep"
    return None


def nests_deeper(text: str, levels: int) -> bool:
    """Whether JSON ``text`` nests more than ``levels`` deep.

    Each level of nesting opens with a bracket of its own, so text with no more brackets than
    ``levels`` cannot nest deeper: most texts are told by counting them.
    """
    return text.count("{") + text.count("[") > levels and budget.nesting(text, levels) > levels


def duplicate_id(entries: Sequence[Entry]) -> str | None:
    seen: set[str] = set()
    for entry in entries:
        if entry.id is None:
            continue
        if entry.id in seen:
            return entry.id
        seen.add(entry.id)
    return None


# -- items and the response -----------------------------------------------------------


def make_item(
    index: int, call_id: str | None, tool: str | None, server: str | None, outcome: Outcome
) -> dict[str, Any]:
    item: dict[str, Any] = {"index": index, "id": call_id, "tool": tool, "server": server, "status": outcome.status}
    if outcome.status == "ok":
        item["result"] = outcome.result
    else:
        item["error"] = cut(outcome.error or outcome.status)
    return item


def cut(text: str, limit: int = ERROR_CHARS) -> str:
    return text if len(text) <= limit else text[:limit]


def entry_share(entries: Sequence[Entry], response_max_bytes: int, keys_sizes: Sequence[int] | None = None) -> int:
    """The ``max_bytes`` each valid entry dispatches with.

    What the response needs besides the results is reserved first: the envelope (counts and
    failed lists as if every valid entry succeeds), every item's own keys, the invalid entries'
    items whole, the separators. The rest is split evenly over the valid entries, so that many
    results each filling its share still fit; never less than ``MIN_SHARE``. ``keys_sizes``, when
    given, is ``ok_keys_sizes(entries)``.
    """
    if keys_sizes is None:
        keys_sizes = ok_keys_sizes(entries)
    invalid = [
        make_item(entry.index, entry.id, entry.tool, None, Outcome("invalid_call", error=entry.error))
        for entry in entries
        if isinstance(entry, InvalidCall)
    ]
    valid = len(entries) - len(invalid)
    # The envelope holds the invalid items and the commas between them; the rest of the commas are added.
    reserved = _envelope_size(len(entries), invalid) + (len(entries) - 1) - max(0, len(invalid) - 1)
    for entry in entries:
        if isinstance(entry, ValidCall):
            reserved += keys_sizes[entry.index] + SERVER_NAME_RESERVE + 2  # the server, at its longest, quoted
    return max(MIN_SHARE, (response_max_bytes - reserved) // max(1, valid))


def _envelope_size(total: int, invalid: list[dict[str, Any]]) -> int:
    """The response's size without its ok items, as if every valid entry succeeds."""
    if not invalid:
        return _all_valid_envelope_size(total)  # the common batch: its size depends on the total alone
    return _measure_envelope(total, invalid)


@functools.lru_cache(maxsize=MAX_CALLS)
def _all_valid_envelope_size(total: int) -> int:
    return _measure_envelope(total, [])


def _measure_envelope(total: int, invalid: list[dict[str, Any]]) -> int:
    envelope = assemble(invalid)
    envelope["counts"] = {"total": total, "succeeded": total - len(invalid), "failed": len(invalid)}
    return budget.size(envelope)


# An ok item as compact JSON without its index, id, tool, server and result:
# {"index":I,"id":"ID","tool":"NAME","server":"SERVER","status":"ok","result":RESULT}
_OK_ITEM_BARE = len('{"index":,"id":,"tool":,"server":,"status":"ok","result":}')
# A failed item's bare keys, less an ok item's: {"index":I,...,"status":"STATUS","error":"TEXT"}
_FAILED_OVER_OK = len('{"index":,"id":,"tool":,"server":,"status":,"error":}') - _OK_ITEM_BARE


def ok_keys_sizes(entries: Sequence[Entry]) -> list[int]:
    """For each entry, the bytes its ok item takes besides its server and result (0 for an invalid entry)."""
    return [_ok_keys_size(entry) if isinstance(entry, ValidCall) else 0 for entry in entries]


def _ok_keys_size(call: ValidCall) -> int:
    return _OK_ITEM_BARE + len(str(call.index)) + budget.string_size(call.id) + budget.string_size(call.name)


def ok_item_size(item: dict[str, Any], keys_size: int) -> int:
    """``item_size(item)`` for an ok item made by ``make_item``, whose ``ok_keys_sizes`` entry is ``keys_size``.

    Only the server and the result are encoded: encoding the whole item cost an entry twice as much,
    and the other keys are the entry's own, measured once as the batch starts.
    """
    server = item["server"]
    text = budget.dumps(item["result"])
    if nests_deeper(text, MAX_RESULT_DEPTH):
        raise RecursionError(f"nested more than {MAX_RESULT_DEPTH} levels deep")
    return keys_size + (4 if server is None else budget.string_size(server)) + budget.text_size(text)


def failed_item_size(item: dict[str, Any], keys_size: int) -> int:
    """``item_size(item)`` for a failed item made by ``make_item`` (a status and an error text, no
    result), whose ``ok_keys_sizes`` entry is ``keys_size``: only its strings are measured."""
    server = item["server"]
    return (
        keys_size
        + _FAILED_OVER_OK
        + budget.string_size(item["status"])
        + budget.string_size(item["error"])
        + (4 if server is None else budget.string_size(server))
    )


def _as_json_item(item: dict[str, Any], exc: Exception) -> tuple[dict[str, Any], int]:
    """An item JSON could not encode (``exc``), and its encoded size: an ok item's result as the
    server SDK would have written it for a single read (a datetime, a model, NaN), or, where even
    that fails (a cycle, a nesting too deep, broken Unicode), an error item. Broken Unicode in the
    item's own texts (a server name, an error) is replaced (see ``_encodable``): a failed item keeps
    its status and its error, an ok item its result."""
    texts = {key: _encodable(value) for key, value in item.items() if key != "result" and isinstance(value, str)}
    mended = {**item, **texts}
    try:
        if "result" not in item:
            return mended, item_size(mended)
        if not isinstance(exc, RecursionError):  # converting never makes a value shallower
            converted = {**mended, "result": budget.as_json(item["result"])}
            return converted, item_size(converted)
    except Exception as failed:  # as in _Run.finish: whatever the result's own methods raise
        exc = failed
    return _unencodable_item(mended, exc)


_SURROGATE = re.compile("[\ud800-\udfff]")  # in a str, every surrogate is a lone one: UTF-8 has no form for it


def _encodable(text: str) -> str:
    """``text`` with each character UTF-8 cannot hold (a lone surrogate) as U+FFFD, the replacement character:
    an error is what its caller needs, and told as an unencodable result it would name the wrong part."""
    return text if is_utf8(text) else _SURROGATE.sub("\ufffd", text)


def item_size(item: dict[str, Any]) -> int:
    """``budget.size(item)``; RecursionError when its result nests deeper than ``MAX_RESULT_DEPTH``."""
    text = budget.dumps(item)
    if nests_deeper(text, MAX_RESULT_DEPTH + 1):  # the item's own object is a level above its result
        raise RecursionError(f"nested more than {MAX_RESULT_DEPTH} levels deep")
    return budget.text_size(text)


def _unencodable_item(item: dict[str, Any], exc: Exception) -> tuple[dict[str, Any], int]:
    """An item JSON cannot encode even mended (a result no JSON can hold, most often), as an error item,
    and its encoded size."""
    keep = {key: item[key] for key in ("index", "id", "tool", "server")}
    failed = {**keep, "status": "error", "error": f"{type(exc).__name__}: the tool's result is not JSON-serializable"}
    return failed, budget.size(failed)


def assemble(items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    failed = [item for item in items if item["status"] in FAILED_STATUSES]
    return {
        "ok": not failed,
        "results": list(items),
        "counts": {"total": len(items), "succeeded": len(items) - len(failed), "failed": len(failed)},
        "failed_ids": [item["id"] for item in failed],
        "failed_indexes": [item["index"] for item in failed],
        "truncated": False,
    }


# -- the run --------------------------------------------------------------------------


class WaitForecast:
    """Whether a host's next batch should open its task group before its first entry starts.

    A batch's other workers start in a task group, and a group costs a pass through the event loop
    as it closes, even when no worker started (2 % of a zero-latency batch of 25's instructions; on
    an HTTP server that pass lets other requests' tasks in). It cannot be opened once an entry waits:
    the read may have opened scopes of its own by then, and they must close in order. So after
    ``QUIET_BATCHES`` batches in a row in which no entry waited, the host's next batch runs its
    entries in its own task with no group. Should one of them wait after all, the batch opens its
    group once that entry is answered, and the rest get the concurrency as usual: the entry that
    waited is the only one run alone, once, and the host's batches open their groups from the start
    again. Keep one per host, for every batch it serves; a batch given none opens its group.
    """

    __slots__ = ("quiet_batches",)

    def __init__(self) -> None:
        self.quiet_batches = 0

    @property
    def expects_waits(self) -> bool:
        return self.quiet_batches < QUIET_BATCHES

    def record(self, waited: bool) -> None:
        """A batch that could run entries at once has ended: ``waited``, whether an entry of it waited."""
        self.quiet_batches = 0 if waited else min(self.quiet_batches + 1, QUIET_BATCHES)


class _Run:
    """One batch in flight: the entries, their items as they finish, and the shared limits."""

    def __init__(
        self,
        entries: list[Entry],
        reader: Reader,
        settings: BatchSettings,
        observer: Observer,
        self_names: frozenset[str],
        forecast: WaitForecast | None = None,
    ) -> None:
        n = len(entries)
        self.entries, self.reader, self.settings = entries, reader, settings
        self.observer, self.self_names = observer, self_names
        self.items: list[dict[str, Any] | None] = [None] * n
        self.sizes = [0] * n
        caps: dict[Any, anyio.Semaphore] = {}
        self.guards = [Guards(settings.call_timeout, caps) for _ in range(n)]
        self.keys_sizes = ok_keys_sizes(entries)
        self.max_bytes = entry_share(entries, settings.response_max_bytes, self.keys_sizes)
        self.progress_lock: anyio.Lock | None = None  # made when the first progress is told
        self.hears_items = bool(getattr(observer, "hears_items", True))
        self.reports_progress = bool(getattr(observer, "reports_progress", True)) and (
            getattr(type(observer), "progress", None) is not QuietObserver.progress
        )
        self.done = 0
        self.helpers_wanted = 0  # workers still to start, once waiting takes the batch's time (see RAMP_WAIT)
        self.start_helper: Callable[[], object] = _no_helper
        self.start_ramp: Callable[[], object] = _no_helper
        self.ramp_scope: anyio.CancelScope | None = None  # made when the first entry waits
        self.wait_mark = (0, 0.0)  # (entries done, anyio.current_time()) when the latest entry began to wait
        self.waited = 0.0  # seconds the entries have waited, while workers may still start
        self.began = 0.0  # time.monotonic() when the entries started
        self.stop_at = math.inf  # time.monotonic() at which the batch time limit passes; set as the run starts
        self.progress_by: float | None = None  # anyio.current_time() by which progress is told; None: unbounded
        self.forecast = forecast if forecast is not None else WaitForecast()
        self.alone = False  # running with no task group that other workers could start in (see WaitForecast)
        self.an_entry_waited = False

    async def run_all(self) -> None:
        # Up to ``concurrency`` workers take the valid entries in call order: the same bound as one
        # task per entry behind a limiter, without paying for a task and a limiter per entry.
        valid = [entry for entry in self.entries if isinstance(entry, ValidCall)]
        pending = iter(valid)
        # Invalid entries are answered before the deadline starts, so it can only reach valid ones.
        for entry in self.entries:
            if isinstance(entry, InvalidCall):
                await self.finish(
                    entry.index,
                    make_item(entry.index, entry.id, entry.tool, None, Outcome("invalid_call", error=entry.error)),
                    0.0,
                )
        workers = min(self.settings.concurrency, len(valid))
        timeout = self.settings.batch_timeout
        self.began = time.monotonic()
        self.stop_at = self.began + timeout
        deadline = anyio.current_time() + timeout
        if workers == 1:
            # One worker needs no task group, and no scope of its own for the batch time limit: the
            # batch's own task works through the entries, and its worker scope carries that limit
            # between calls. This spares a task, a group and a scope per batch: most of a batch of
            # 1's own cost. Only a cancellation can leave a worker, and it leaves a group the same way.
            await self.work_through(pending, deadline)
        else:
            left: Iterator[ValidCall] | None = pending
            if not self.forecast.expects_waits:  # the same, until an entry waits (see WaitForecast)
                left = await self.work_alone(pending, deadline, workers)
            if left is not None:
                try:
                    await _in_group(functools.partial(self.work_in_group, left, deadline, workers), deadline)
                finally:  # the starters refer to this run: dropped, the run is freed without the cycle collector
                    self.helpers_wanted, self.start_helper, self.start_ramp = 0, _no_helper, _no_helper
            self.forecast.record(self.an_entry_waited)
        await self.report_deadline()

    async def work_alone(
        self, pending: Iterator[ValidCall], deadline: float, workers: int
    ) -> Iterator[ValidCall] | None:
        """Run entries in this task, with no group, until one waits: the entries left then, or None."""
        self.alone, self.helpers_wanted = True, workers - 1  # so that the first wait is seen
        try:
            await self.work_through(pending, deadline)
        finally:
            self.alone, self.helpers_wanted = False, 0
        left = list(pending) if self.an_entry_waited and time.monotonic() < self.stop_at else []
        return iter(left) if left else None

    async def work_in_group(
        self, pending: Iterator[ValidCall], deadline: float, workers: int, tasks: TaskGroup
    ) -> None:
        """This task's worker, in ``tasks``, where the ramp starts the others once waiting takes the time."""
        self.helpers_wanted = workers - 1
        self.start_helper = functools.partial(tasks.start_soon, _group_task, self.work_as_helper, pending, deadline)
        self.start_ramp = functools.partial(tasks.start_soon, _group_task, self.ramp)
        await self.work_through(pending, deadline)
        self.helpers_wanted = 0  # every entry is taken: no worker is wanted any more,
        self.stop_ramp()  # and the ramp's watch would hold the group

    def entry_waits(self) -> None:
        """An entry waits on something: note when, and the first time, start the ramp (see ``ramp``).

        With no group yet (``work_alone``), the entry is left to wait alone and no more are taken.
        """
        self.an_entry_waited = True
        if self.alone:
            self.helpers_wanted = 0
            return
        self.wait_mark = (self.done, anyio.current_time())
        if self.ramp_scope is None:
            self.ramp_scope = anyio.CancelScope()
            self.start_ramp()

    def resumed(self, suspended: float) -> bool:
        """An entry's wait that began at ``suspended`` (``time.monotonic()``) is over: True while
        workers may still start. They start now if the waits make up half the batch's time so far."""
        now = time.monotonic()
        self.waited += now - suspended
        if self.waited >= RAMP_WAIT and 2 * self.waited >= now - self.began:
            self.start_helpers()
        return self.helpers_wanted > 0

    async def ramp(self) -> None:
        """Start the other workers when one entry has been waiting ``RAMP_WAIT``.

        With one worker running, an entry is still waiting while no entry has finished since it
        began to wait.
        """
        assert self.ramp_scope is not None
        with self.ramp_scope:
            while self.helpers_wanted > 0:
                done_then, began = self.wait_mark
                left = began + RAMP_WAIT - anyio.current_time()
                if self.done != done_then:  # that entry finished: look again once the next may have waited long enough
                    left = RAMP_WAIT
                elif left <= 0:
                    self.start_helpers()
                    return
                await anyio.sleep(left)

    def stop_ramp(self) -> None:
        if self.ramp_scope is not None:
            self.ramp_scope.cancel()

    def start_helpers(self) -> None:
        """Start every worker still wanted, at once; the ramp's watch is then over."""
        self.stop_ramp()
        while self.helpers_wanted > 0:
            self.helpers_wanted -= 1
            try:
                self.start_helper()
            except RuntimeError:  # the group no longer takes tasks (it is closing): the workers running finish
                log.debug("no further batch worker could start", exc_info=True)
                self.helpers_wanted = 0

    async def work_as_helper(self, pending: Iterator[ValidCall], batch_deadline: float) -> None:
        """A worker the ramp started: it takes no entry once the batch is being cancelled.

        Helpers can be started in the very turn a cancellation arrives (the ramp's sleep ending as the
        client cancels, or a cancelled entry's wait tipping ``resumed``); a task started in a cancelled
        group runs until its first checkpoint, which would be inside a newly dispatched call.
        """
        if anyio.current_effective_deadline() == -math.inf:
            return
        await self.work_through(pending, batch_deadline)

    async def work_through(self, pending: Iterator[ValidCall], batch_deadline: float) -> None:
        """Run entries from ``pending`` until none is left, each call under its time limit.

        The worker lends its entries one cancel scope for their call time limits (see ``Guards``)
        and keeps the ``batch_deadline`` (in ``anyio.current_time()``) on that scope between
        calls. When a call's limit passes, the scope has ended the call and the
        entry is answered here; the worker goes on with a fresh scope, since a cancelled one stays
        cancelled. When the batch's passes, the worker stops and ``report_deadline`` answers the rest.
        """
        while True:
            with anyio.CancelScope(deadline=batch_deadline) as scope:
                for call in pending:
                    # Nothing on an entry's own path need yield to the loop (a zero-latency backend does not),
                    # so the batch time limit's cancellation may not have been delivered yet: an entry taken
                    # after the limit passed is left undispatched, as the limit's report says.
                    if time.monotonic() >= self.stop_at:
                        return
                    started = time.perf_counter() if self.hears_items else 0.0  # only an item observer reads it
                    guards = self.guards[call.index]
                    guards.scope, guards.resting = scope, batch_deadline
                    try:
                        await self.run_one(call, started)
                    except anyio.get_cancelled_exc_class() as exc:
                        # The worker's scope may end it here, where no caller drops these frames: trio
                        # keeps its Cancelled in a reference cycle, which would hold the run and entries.
                        _drop_frames_below(exc)
                        raise
                    if scope.cancel_called:  # a late answer, already told as timed out: a fresh scope for the rest
                        break
                    if self.alone and self.an_entry_waited:  # the rest wait for a group (see work_alone)
                        return
                else:
                    return
            if anyio.current_time() >= batch_deadline:
                return
            if self.items[call.index] is None:  # its call time limit ended the call
                outcome = Outcome("error", guards.tool, error=call_timed_out(guards.call_timeout))
                # Told within the batch time limit too: a progress report that never completes must
                # not hold the batch past it (the item is kept before anyone is told).
                with anyio.CancelScope(deadline=batch_deadline):
                    seconds = time.perf_counter() - started if self.hears_items else 0.0
                    await self.finish(call.index, _item_of(call, outcome), seconds)

    async def run_one(self, call: ValidCall, started: float) -> None:
        if call.name in self.self_names:
            outcome = Outcome("blocked", error=f"{call.name} cannot be called from inside a batch: name a backend tool")
        else:
            try:
                guards = self.guards[call.index]
                reading = self.reader(call, self.max_bytes, guards)
                if type(reading) is not CoroutineType:  # another awaitable: driven through a coroutine of ours
                    reading = _awaiting(reading)
                outcome = await _driven(reading, guards, self)
            except BaseException as exc:  # the reader should not raise; if it does, only its entry fails
                if must_propagate(exc):
                    raise
                log.error("batch reader raised for entry %d", call.index, exc_info=exc)
                outcome = Outcome("error", error=describe(exc))
            if guards.scope is not None and guards.scope.cancel_called:
                # A limit passed while the call ran, and its backend answered anyway (it swallowed the
                # cancellation): the cancellation is raised here, so the worker answers the entry for
                # whichever limit it was, the call's or the batch's, as it does a call that was cut off.
                await anyio.lowlevel.checkpoint_if_cancelled()
        seconds = time.perf_counter() - started if self.hears_items else 0.0
        await self.finish(call.index, _item_of(call, outcome), seconds)

    async def finish(self, index: int, item: dict[str, Any], seconds: float) -> None:
        try:
            # Every item of a valid entry (those with a keys size) is made by _item_of, of the entry's own
            # index, id and name; an invalid entry's item echoes what it could of the entry, and is encoded.
            keys_size = self.keys_sizes[index]
            if item["status"] == "ok":
                self.sizes[index] = ok_item_size(item, keys_size)
            else:
                self.sizes[index] = failed_item_size(item, keys_size) if keys_size else item_size(item)
        except Exception as exc:  # TypeError, ValueError, RecursionError, or what a result's own methods raise
            # (a container whose items() raise, an object whose __str__ does): that entry fails, not the batch
            item, self.sizes[index] = _as_json_item(item, exc)
        self.items[index] = item
        if self.hears_items:
            told = self.observer.item_completed(item, seconds)
            if told is not None:
                await told
        if not self.reports_progress:
            self.done += 1
            return
        if self.progress_by is None:
            await self.tell_progress(item)
            return
        with anyio.CancelScope(deadline=self.progress_by):  # past the batch limit: an untold report is dropped
            await self.tell_progress(item)

    async def tell_progress(self, item: dict[str, Any]) -> None:
        if self.progress_lock is None:
            self.progress_lock = _uncontended_lock()
        async with self.progress_lock:
            self.done += 1
            await self.observer.progress(self.done, len(self.entries), _progress_message(item))

    async def report_deadline(self) -> None:
        """Answer each entry the batch time limit left unanswered, its progress told within REPORT_GRACE."""
        limit = self.settings.batch_timeout
        for index, item in enumerate(self.items):
            if item is not None:
                continue
            if self.progress_by is None:  # the first entry the limit left: the grace starts now
                self.progress_by = anyio.current_time() + REPORT_GRACE
            call = self.entries[index]
            assert isinstance(call, ValidCall)
            if self.guards[index].dispatched:
                error = f"TimeoutError: cancelled while running: the batch time limit of {limit:g}s passed"
            else:
                error = f"TimeoutError: not dispatched: the batch time limit of {limit:g}s passed first"
            # A call cut off while running names its server, as one its own time limit cut off does.
            await self.finish(index, _item_of(call, Outcome("error", self.guards[index].tool, error=error)), 0.0)


def _item_of(call: ValidCall, outcome: Outcome) -> dict[str, Any]:
    return make_item(call.index, call.id, call.name, outcome.tool.server if outcome.tool else None, outcome)


def _no_helper() -> None:
    return None


async def _in_group(work: Callable[[TaskGroup], Awaitable[None]], deadline: float) -> None:
    """Await ``work(tasks)`` in a new task group, ``tasks``, whose scope carries the batch ``deadline``.

    Each worker's scope carries the batch time limit, so a worker tells a late answer from its own
    scope as one worker does; the group's scope carries it too, for whatever a worker awaits outside
    its scope. A cancellation leaves this frame holding nothing of the batch (see ``_group_task``):
    before anyio 4.7, the group's exit kept the traceback it was handed, from this frame down, in a
    reference cycle of its own.
    """
    async with anyio.create_task_group() as tasks:
        tasks.cancel_scope.deadline = deadline
        try:
            await work(tasks)
        except anyio.get_cancelled_exc_class() as exc:
            _drop_frames_below(exc)
            del work  # this frame stays in the traceback (and, before anyio 4.7, in the group's exit)
            raise


async def _group_task(work: Callable[..., Awaitable[None]], *args: Any) -> None:
    """Await ``work(*args)`` as a task of the batch's group, which a cancellation leaves without the batch.

    anyio's task group keeps the exception that ends a task in a reference cycle (the frame of its
    done callback, in the exception's own traceback, holds the exception), and the traceback holds
    every frame the cancellation came through: the run, the entries, their guards and readers would
    wait for the cycle collector with it.
    """
    try:
        await work(*args)
    except anyio.get_cancelled_exc_class() as exc:
        _drop_frames_below(exc)
        del work, args  # this frame stays in the traceback
        raise


def _drop_frames_below(exc: BaseException) -> None:
    """Drop from the traceback of ``exc``, just caught, the frames below the one that caught it.

    For cancellations only: nobody reads where a cancellation found the batch, while an error's
    traceback is how it is debugged.
    """
    caught_here = exc.__traceback__
    if caught_here is not None:
        caught_here.tb_next = None


def _uncontended_lock() -> anyio.Lock:
    """A lock that costs no event-loop turn when nobody holds it (anyio >= 4.5); else anyio's plain one.

    It only keeps progress notifications in order: a checkpoint on every acquisition was a turn of
    the loop per entry, the largest single part of a zero-latency entry's own cost.
    """
    try:
        return anyio.Lock(fast_acquire=True)
    except TypeError:
        return anyio.Lock()


def _progress_message(item: dict[str, Any]) -> str:
    label = item["id"] if item["id"] is not None else f"#{item['index']}"
    return f"{label} ({item['tool'] or '?'}): {item['status']}"


async def run_batch(
    calls: Any,
    reader: Reader,
    settings: BatchSettings,
    observer: Observer | None = None,
    self_names: frozenset[str] = frozenset(),
    forecast: WaitForecast | None = None,
) -> dict[str, Any]:
    """Run one batch; per-entry problems become items, whole-batch problems a rejection.

    ``forecast``: the host's, kept for all its batches (see ``WaitForecast``); none opens a group.
    """
    started = time.perf_counter()
    observer = observer or QuietObserver()
    rejection = check_batch(calls)
    entries = [] if rejection else parse_entries(calls)
    repeated = None if rejection else duplicate_id(entries)
    if repeated is not None:
        rejection = f"duplicate call id '{repeated}': ids must be unique within a batch so results can be correlated"
    if rejection:
        return {"ok": False, "error": rejection}
    # Told in the batch's own task, so what an observer starts here (a span) is current in every entry's task.
    told = observer.batch_started(len(entries))
    if told is not None:
        await told
    run = _Run(entries, reader, settings, observer, self_names, forecast)
    try:
        await run.run_all()
    except anyio.get_cancelled_exc_class() as exc:  # the client, or the router shutting down: no answer will go out
        _drop_frames_below(exc)  # the entries' frames, which a task group's cycle would keep (see _group_task)
        await _tell_cancelled(observer, time.perf_counter() - started)
        del calls, reader, settings, observer, entries, run  # this frame stays in the traceback
        raise
    items = [item for item in run.items if item is not None]
    response = budget.fit(assemble(items), settings.response_max_bytes, run.sizes)
    told = observer.batch_completed(response, time.perf_counter() - started)
    if told is not None:
        await told
    return response


async def _tell_cancelled(observer: Observer, seconds: float) -> None:
    """Tell ``observer`` its batch was cancelled, shielded from the cancellation for REPORT_GRACE at most."""
    with anyio.move_on_after(REPORT_GRACE, shield=True):
        told = observer.batch_cancelled(seconds)
        if told is not None:
            await told
