"""The conformance kit catches a broken host: each host below breaks one clause of the hook contract.

The hosts are run through the kit as a host author runs it, a module subclassing HostConformance,
in one inner pytest session (pytester), and each must fail the kit's check for its clause with a
message that says what to fix.
"""

from __future__ import annotations

import pytest

# Imported here, as a host author's test module imports it: pytester's inline_run drops every module
# first imported during a run, so a kit (and SDK) imported anew by each inner session would not be
# the one the other sessions and this process hold.
import centralmcp_batch.testing  # noqa: F401
from centralmcp_batch.hosting import load_entry_points, plugin_manager

# So are the installed centralmcp plugins each inner session loads, for the same reason and one more: a
# module one of them imports may change the interpreter as it loads. opentelemetry-api 1.27 (the otel
# extra's lowest) imports the importlib_metadata backport, which takes the standard library's finder
# of installed distributions out of service for its own; first imported inside an inner session, the
# backport and its finder were dropped at that session's end, and the next session found no installed
# distribution at all, so loaded no pytest plugin (anyio's) and skipped every async check of the kit.
load_entry_points(plugin_manager())

HOSTS = '''
import json

import pytest

from centralmcp_batch import InvalidCursor
from centralmcp_batch.hookspecs import hookimpl
from centralmcp_batch.testing import HostConformance, InlineHost, sample_host

ITEMS = [{"n": i, "text": "x" * 40} for i in range(100)]
PAGE = 10  # about 600 bytes a page: within the kit's smallest share
ITEM_BYTES = 80  # more than one item takes in a page, its cursor's share included


class PagedHost(InlineHost):
    """A correct host with a paged read tool whose cursors are bound to tool and arguments."""

    def __init__(self):
        super().__init__()
        base = sample_host()
        self.handlers, self.refs = base.handlers, base.refs
        self.add("pages", lambda **arguments: None)

    def cursor(self, tool, arguments, offset):
        return json.dumps([tool, arguments, offset], sort_keys=True)

    @hookimpl
    def centralmcp_resume_cursor(self, tool, arguments, cursor):
        try:
            issued_for, issued_with, offset = json.loads(cursor)
        except ValueError:
            raise InvalidCursor("cursor is malformed") from None
        if (issued_for, issued_with) != (tool.name, dict(arguments)):
            raise InvalidCursor("cursor was issued for another call")
        return offset

    @hookimpl
    async def centralmcp_dispatch_read(self, tool, arguments, resume, max_bytes, context):
        if tool.name != "pages":
            return self.handlers[tool.name](resume=resume, **arguments)
        return self.page(tool.name, arguments, resume or 0, max_bytes // ITEM_BYTES)

    def page(self, name, arguments, offset, count=PAGE):
        if offset + count >= len(ITEMS):
            return {"items": ITEMS[offset:]}  # the rest fits: the whole answer, as a backend gives it
        return {"items": ITEMS[offset : offset + count], "next_cursor": self.cursor(name, arguments, offset + count)}


class GateRefusesWithTrue(PagedHost):
    @hookimpl
    def centralmcp_read_gate(self, tool):
        return None if tool.read_only else True


class GateRefusesWithNothingToSay(PagedHost):
    @hookimpl
    def centralmcp_read_gate(self, tool):
        return None if tool.read_only else ""


class GateOnlyStopsDestructive(PagedHost):
    @hookimpl
    def centralmcp_read_gate(self, tool):
        return "destructive" if tool.annotations.get("destructiveHint") else None


class FindAnswersItsOwnName(PagedHost):
    @hookimpl
    def centralmcp_find_tool(self, name):
        tool = self.refs.get(name)
        return None if tool is None else type(tool)("inline." + name, tool.server, tool.annotations)


class FindRaisesForUnknown(PagedHost):
    @hookimpl
    def centralmcp_find_tool(self, name):
        return self.refs[name]


class FindSpellsTheHintInSnakeCase(PagedHost):
    """Its gate goes by read_only, and its ToolRefs carry read_only_hint, which read_only does not read."""

    @hookimpl
    def centralmcp_find_tool(self, name):
        tool = self.refs.get(name)
        hint = None if tool is None else tool.annotations.get("readOnlyHint")
        return None if tool is None else type(tool)(name, tool.server, {"read_only_hint": hint})


class DispatchIgnoresMaxBytes(PagedHost):
    def page(self, name, arguments, offset, count=PAGE):
        return {"items": ITEMS[offset:]}


class SmallAnswerIgnoresMaxBytes(PagedHost):
    """Never bounds its answer, and the kit's read of it is small: the bound holds whatever dispatch does."""

    def page(self, name, arguments, offset, count=PAGE):
        return {"items": ITEMS[:5]}


class DispatchAddsDefaults(PagedHost):
    @hookimpl
    async def centralmcp_dispatch_read(self, tool, arguments, resume, max_bytes, context):
        arguments.setdefault("limit", PAGE)
        return self.page(tool.name, {"q": arguments["q"]}, resume or 0)


class DispatchIgnoresResume(PagedHost):
    @hookimpl
    async def centralmcp_dispatch_read(self, tool, arguments, resume, max_bytes, context):
        return self.page(tool.name, arguments, 0)


class CursorIgnoresArguments(PagedHost):
    @hookimpl
    def centralmcp_resume_cursor(self, tool, arguments, cursor):
        issued_for, _, offset = json.loads(cursor)
        if issued_for != tool.name:
            raise InvalidCursor("cursor was issued for another tool")
        return offset


class CursorIgnoresTool(PagedHost):
    @hookimpl
    def centralmcp_resume_cursor(self, tool, arguments, cursor):
        _, issued_with, offset = json.loads(cursor)
        if issued_with != dict(arguments):
            raise InvalidCursor("cursor was issued for other arguments")
        return offset


class TokenHookDrawsNothing(PagedHost):
    @hookimpl
    async def centralmcp_acquire_rate_token(self, tool):
        pass  # looks the limiter up, never draws from it


class DispatchDrawsAgain(PagedHost):
    """Dispatches through its single-read path, which draws a token of its own."""

    @hookimpl
    async def centralmcp_dispatch_read(self, tool, arguments, resume, max_bytes, context):
        self.tokens.append(tool.name)
        return await super().centralmcp_dispatch_read(tool, arguments, resume, max_bytes, context)


class FindNamesTheRouter(PagedHost):
    """Dispatches by name alone, so every read succeeds; its ToolRefs name the router, not the backend."""

    @hookimpl
    def centralmcp_find_tool(self, name):
        tool = self.refs.get(name)
        return None if tool is None else type(tool)(name, "router", tool.annotations)


class MixedSyncAndAsync(PagedHost):
    """Correct: every hook's flavour swapped, which the contract allows."""

    @hookimpl
    async def centralmcp_find_tool(self, name):
        return self.refs.get(name)

    @hookimpl
    async def centralmcp_read_gate(self, tool):
        return None if tool.read_only else "not read-only"

    @hookimpl
    def centralmcp_acquire_rate_token(self, tool):
        self.tokens.append(tool.name)


def kit_for(host_class):
    class Kit(HostConformance):
        read_tool, write_tool, read_arguments = "pages", "delete_everything", {"q": "x"}
        read_server = "inline"

        def tokens_drawn(self, host_plugins):
            return len(host_plugins[0].tokens)

        @pytest.fixture
        def host_plugins(self):
            return [host_class()]

    return Kit


for host_class in list(globals().values()):
    if isinstance(host_class, type) and issubclass(host_class, PagedHost):
        globals()["Test" + host_class.__name__] = kit_for(host_class)


class NoWritesHost(PagedHost):
    """Correct, and publishes no write tool: its kit says write_tool = None."""

    def __init__(self):
        super().__init__()
        del self.handlers["delete_everything"], self.refs["delete_everything"]


class NoWritesGateAllowsAll(NoWritesHost):
    """With nothing to write in its catalog, its gate allows whatever it is asked about."""

    @hookimpl
    def centralmcp_read_gate(self, tool):
        return None


class TestNoWritesHost(kit_for(NoWritesHost)):
    write_tool = None


class TestNoWritesGateAllowsAll(kit_for(NoWritesGateAllowsAll)):
    write_tool = None


class TestWriteToolUnset(kit_for(PagedHost)):
    write_tool = ""
'''

# Each broken host: the kit's check that must fail, and what its message must say.
CAUGHT = {
    "GateRefusesWithTrue": ("test_gate_answers_none_or_a_message", "with [True]: refuse with a non-empty string"),
    "GateRefusesWithNothingToSay": ("test_gate_answers_none_or_a_message", "with ['']: refuse with a non-empty"),
    "GateOnlyStopsDestructive": (
        "test_gate_refuses_a_write_that_is_not_destructive",
        "refuse every tool whose readOnlyHint is not true",
    ),
    "FindAnswersItsOwnName": (
        "test_find_tool_answers_the_tool_asked_for",
        "centralmcp_find_tool('pages') answered a ToolRef named 'inline.pages'",
    ),
    "FindRaisesForUnknown": (
        "test_find_tool_answers_none_for_an_unknown_name",
        "centralmcp_find_tool raised KeyError for an unknown name: answer None",
    ),
    "FindSpellsTheHintInSnakeCase": (
        "test_gate_answers_none_or_a_message",
        "for the read tool 'pages' (its ToolRef's read_only is False: annotations {'read_only_hint': True}, and "
        "read_only is annotations['readOnlyHint'] is True, MCP's camelCase key): None allows",
    ),
    "DispatchIgnoresMaxBytes": ("test_dispatch_keeps_within_max_bytes", "bound the answer to max_bytes"),
    "SmallAnswerIgnoresMaxBytes": (
        "test_dispatch_keeps_within_max_bytes",
        "at max_bytes=1000000, within 1024: any dispatch keeps that bound; choose read_arguments whose answer is",
    ),
    "DispatchAddsDefaults": (
        "test_dispatch_leaves_the_arguments_alone",
        "centralmcp_dispatch_read changed the arguments it was given to {'q': 'x', 'limit': 10}",
    ),
    "DispatchIgnoresResume": (
        "test_dispatch_resumes_where_the_cursor_says",
        "answered the first page again for its own next cursor",
    ),
    "CursorIgnoresArguments": (
        "test_cursor_is_refused_for_other_arguments",
        "accepted a cursor for other arguments: bind it to its arguments",
    ),
    "CursorIgnoresTool": (
        "test_cursor_is_refused_for_another_tool",
        "accepted 'pages''s cursor for 'delete_everything': bind it to its tool",
    ),
    "TokenHookDrawsNothing": (
        "test_each_read_draws_one_token_from_the_hosts_limiter",
        "drew 0 tokens from your limiter (tokens_drawn); expected 3, one per read: "
        "centralmcp_acquire_rate_token must draw one",
    ),
    "DispatchDrawsAgain": (
        "test_each_read_draws_one_token_from_the_hosts_limiter",
        "drew 6 tokens from your limiter (tokens_drawn); expected 3, one per read: "
        "draw only in centralmcp_acquire_rate_token",
    ),
    "FindNamesTheRouter": (
        "test_find_tool_names_the_server_that_serves_the_tool",
        "centralmcp_find_tool('pages') answered server 'router', but 'pages' is served by 'inline' (read_server)",
    ),
}


def verdicts(pytester: pytest.Pytester, *options: str) -> dict[str, dict[str, str]]:
    """Each host class's kit checks that did not pass, test name to failure or skip text, from one inner session.

    A skip counts: a check the kit skips proves nothing about the host.
    """
    pytester.makepyfile(test_hosts=HOSTS)
    recorder = pytester.inline_run("-p", "no:cacheprovider", *options)
    not_passed: dict[str, dict[str, str]] = {}
    for report in recorder.getreports("pytest_runtest_logreport"):
        host, test = report.nodeid.split("::")[1:3]
        failures = not_passed.setdefault(host.removeprefix("Test"), {})
        if report.failed or report.skipped:
            failures[test] = report.longreprtext
    return not_passed


def test_the_kit_fails_each_broken_host_with_a_message_that_says_what_to_fix(pytester: pytest.Pytester) -> None:
    failed = verdicts(pytester, "-k", " or ".join(CAUGHT))
    assert set(failed) == set(CAUGHT)
    for host, (test, message) in CAUGHT.items():
        assert test in failed[host], f"{host} passed {test}; it failed {sorted(failed[host])}"
        assert message in failed[host][test], f"{host}: {failed[host][test]}"


def test_the_kit_checks_a_host_that_publishes_no_write_tool(pytester: pytest.Pytester) -> None:
    # Before, write_tool had to name a tool: a read-only host failed four checks ("the write tool '' was not
    # blocked", "centralmcp_find_tool('') answered None"), and an unset write_tool failed them the same way.
    failed = verdicts(pytester, "-k", "NoWrites or WriteToolUnset")
    skipped = "write_tool is None: this check needs a write tool of your host by name"
    assert {test: skipped in text for test, text in failed["NoWritesHost"].items()} == {
        "test_gate_refusals_never_reach_dispatch": True,
        "test_cursor_is_refused_for_another_tool": True,
    }
    # The gate is asked about a stand-in write instead, and one that allows it fails.
    assert (
        "no centralmcp_read_gate refused the write tool 'centralmcp-conformance-write'"
        in (failed["NoWritesGateAllowsAll"]["test_gate_answers_none_or_a_message"])
    )
    unset = failed["WriteToolUnset"]
    assert len(unset) == 15 and all(
        "set write_tool to the name of a write tool of your host, or to None when it publishes none" in text
        for text in unset.values()
    )


def test_the_kit_passes_a_correct_host(pytester: pytest.Pytester) -> None:
    # Mixed sync and async hooks are within the contract; every check runs (the cursor, token and server checks too).
    failed = verdicts(pytester, "-k", "TestPagedHost or TestMixedSyncAndAsync", "-W", "error")
    assert failed == {"PagedHost": {}, "MixedSyncAndAsync": {}}


# -- the pytest plugin itself: loaded by every pytest run beside the package ---------------------

LAZY = """
import sys


def test_a_run_that_uses_no_fixture_of_the_kit_imports_neither_it_nor_the_sdk():
    assert "centralmcp_batch.pytest_plugin" in sys.modules  # loaded, as every pytest11 plugin is
    loaded = ("centralmcp_batch.testing", "centralmcp_batch.inline_host", "mcp")
    assert [name for name in loaded if name in sys.modules] == []


def test_a_fixture_loads_its_host_and_the_kit_has_its_asserts_rewritten(centralmcp_host):
    assert type(centralmcp_host).__name__ == "InlineHost"
    import centralmcp_batch.testing as kit

    assert type(kit.__loader__).__name__ == "AssertionRewritingHook"
"""


def test_the_pytest_plugin_imports_the_kit_only_for_a_test_that_asks_for_a_fixture(pytester: pytest.Pytester) -> None:
    # Importing the kit costs about half a second (the SDK, pluggy, the router) in every project that
    # shares the environment; an SDK that does not import would stop all their runs.
    pytester.makepyfile(test_lazy=LAZY)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_a_conftest_that_names_the_kit_as_its_plugin_still_gets_the_fixtures(pytester: pytest.Pytester) -> None:
    # 0.1.0's entry point was the kit itself; a project that loads plugins by hand may name it so.
    pytester.makeconftest('pytest_plugins = ["centralmcp_batch.testing"]\n')
    pytester.makepyfile(
        test_named="def test_it(centralmcp_host, centralmcp_server, centralmcp_call):\n    assert centralmcp_server\n"
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:centralmcp_batch")
    result.assert_outcomes(passed=1)
