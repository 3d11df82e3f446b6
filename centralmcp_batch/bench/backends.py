"""What the scenarios call: the ``wait`` backend tool, the reference router over it, a bare host."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import anyio

from .. import _compat
from ..hookspecs import hookimpl
from ..models import CallContext, ToolRef
from .environ import environment
from .plan import LIFTED_LIMIT


async def wait(seconds: float = 0.0, tag: str = "") -> dict[str, Any]:
    """The benchmark's backend tool: sleeps ``seconds`` (none at 0) and echoes ``tag``."""
    if seconds > 0:
        await anyio.sleep(seconds)
    return {"tag": tag, "slept": seconds}


def backend_server() -> Any:
    server = _compat.new_server("bench-backend")
    _compat.add_tool(
        server, wait, name="wait", description="Sleep, then echo the tag.", annotations={"readOnlyHint": True}
    )
    return server


def build_router() -> Any:
    from ..router import Router

    with environment(**LIFTED_LIMIT):  # read once, when the router is built
        return Router({"bench": backend_server()})


class BenchHost:
    """A host whose backends are plain functions, with nothing else in the way.

    The package's own (not ``centralmcp_batch.testing``, which needs pytest): ``centralmcp-batch
    bench`` runs from a plain install.
    """

    def __init__(self, handlers: Mapping[str, Callable[..., Any]]) -> None:
        self.handlers = dict(handlers)
        self.refs = {name: ToolRef(name, "inline", {"readOnlyHint": True}) for name in handlers}

    @hookimpl
    def centralmcp_find_tool(self, name: str) -> ToolRef | None:
        return self.refs.get(name)

    @hookimpl
    def centralmcp_read_gate(self, tool: ToolRef) -> str | None:
        return None if tool.read_only else f"Tool '{tool.name}' is not read-only."

    @hookimpl
    async def centralmcp_dispatch_read(
        self, tool: ToolRef, arguments: Mapping[str, Any], resume: Any, max_bytes: int, context: CallContext
    ) -> Any:
        answer = self.handlers[tool.name](**arguments)
        return await answer if hasattr(answer, "__await__") else answer


def zero_host() -> BenchHost:
    return BenchHost({"wait": wait})
