"""The few exceptions of the contract.

Exception
 ├── InvalidCursor          a host refuses a continuation cursor; the message becomes the item's error
 └── HostContractError      a host does not meet a plugin's manifest (a required hook is missing)
      ├── ManifestError     a plugin.toml that cannot be read or is not well formed
      ├── PluginError       an installed plugin cannot be loaded or cannot add its tools
      └── ToolNameTaken     a tool name the server already publishes

and ``sole_cause``, which finds what went wrong inside the exception groups anyio wraps it in, and
``text_of``, which reads a foreign exception's or error's text without letting its ``__str__`` raise.
"""

from __future__ import annotations

import asyncio
import math
import sys
from typing import cast

import anyio

if sys.version_info < (3, 11):  # pragma: no cover - Python 3.10
    from exceptiongroup import BaseExceptionGroup


class InvalidCursor(Exception):
    """Raised by ``centralmcp_resume_cursor`` to refuse a cursor."""


class HostContractError(Exception):
    """A host cannot run a plugin: the message names the plugin and the hook."""


class ManifestError(HostContractError):
    """A plugin manifest that cannot be read or does not say what it must."""


class PluginError(HostContractError):
    """An installed ``centralmcp`` plugin is broken: the message names its entry point and distribution."""


class ToolNameTaken(HostContractError):
    """A plugin registers a tool under a name the server already publishes (``name``)."""

    def __init__(self, name: str, message: str | None = None) -> None:
        super().__init__(message or f"the server already publishes a tool named {name!r}")
        self.name = name


def sole_cause(exc: BaseException) -> BaseException:
    """The exception inside ``exc``'s groups of one (anyio's task groups wrap what happened); ``exc`` itself
    when it is no group, or a group of several."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def text_of(value: object) -> str:
    """``str(value)``; when the value's own ``__str__`` raises (or answers no string), a note that says so.

    A host's or backend's exception, or the error it answers, is told in its entry's error, and reading its
    text must not raise in turn: the entry would be told by the wrong exception, or the batch would fail.
    """
    try:
        return str(value)
    except Exception as failure:  # noqa: BLE001 - any failure of a foreign __str__ is told the same way
        return f"<its text could not be read: str() raised {type(failure).__name__}>"


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
