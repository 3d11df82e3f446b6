"""Installed plugins that are broken, as a router's operator meets them.

Each is a real installed distribution (``installed.py``) found through the ``centralmcp`` entry-point
group. A plugin that cannot load or cannot add its tools stops the start-up with one line naming the
entry point, the distribution and what to do; none leaves a router running without its batch, and
none widens the read-only gate or spends the host's rate limit.
"""

from __future__ import annotations

import importlib
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from installed import fresh_name, install_distribution

from centralmcp_batch import ManifestError, PluginError, _compat, hosting
from centralmcp_batch.commands import plugin_report
from centralmcp_batch.router import demo
from centralmcp_batch.router.demo import demo_router
from centralmcp_batch.testing import InlineHost, call, sample_host


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory of the path, ahead of the environment's: its distributions are found first."""
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.fixture
def late_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory of the path after the environment's: its distributions are found last."""
    monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path)])
    importlib.invalidate_caches()
    return tmp_path


def install_plugin(site: Path, stem: str, source: str, attribute: str = "", name: str = "acme") -> tuple[str, str]:
    """A distribution ``acme-...`` whose entry point ``name`` is its package (or ``attribute`` of it):
    answers the distribution's name and the entry point's value."""
    package = fresh_name(stem)
    value = package + attribute
    dist = install_distribution(
        site, package, {name: value}, modules={"__init__": source}, distribution=package.replace("_", "-")
    )
    return dist, value


HOOKIMPL = "from centralmcp_batch.hookspecs import hookimpl\n\n\n"
UNLOADABLE = {
    "import-error": ("import centralmcp_no_such_module\n", "", "ModuleNotFoundError: No module named"),
    "syntax-error": ("def broken(:\n    pass\n", "", "SyntaxError: "),
    "raises-at-import": ("raise RuntimeError('ACME_TOKEN is not set')\n", "", "RuntimeError: ACME_TOKEN is not set"),
    "exits-at-import": ("import sys\nsys.exit('acme: no config')\n", "", "SystemExit: acme: no config"),
    "no-such-attribute": ("hooks_v1 = None\n", ":hooks", "AttributeError: module "),
    "hook-without-spec": (
        HOOKIMPL + "@hookimpl\ndef centralmcp_batch_finished(response, seconds):\n    pass\n",
        "",
        "PluginValidationError: unknown hook 'centralmcp_batch_finished'",
    ),
    "argument-not-in-spec": (
        HOOKIMPL + "@hookimpl\ndef centralmcp_read_gate(tool, policy):\n    return None\n",
        "",
        "Argument(s) {'policy'} are declared in the hookimpl but can not be found in the hookspec",
    ),
}


@pytest.mark.parametrize("kind", UNLOADABLE)
def test_a_plugin_that_cannot_load_stops_install_with_one_line_naming_it(site: Path, kind: str) -> None:
    source, attribute, cause = UNLOADABLE[kind]
    dist, value = install_plugin(site, "acme_unloadable", source, attribute)
    server = _compat.new_server("broken-plugin")
    with pytest.raises(PluginError) as refused:
        hosting.install(server, InlineHost())
    told = str(refused.value)
    assert told.startswith(f"centralmcp plugin 'acme' (entry point {value} of {dist} 1.0) cannot be loaded: ")
    assert cause in told and told.endswith(f"(pip uninstall {dist})") and "\n" not in told
    assert _compat.tool_names(server) == []  # nothing was registered before the refusal


def test_the_plugins_command_names_the_broken_plugin_too(site: Path) -> None:
    dist, _ = install_plugin(site, "acme_unloadable", "import centralmcp_no_such_module\n")
    from centralmcp_batch.commands import CommandFailed, plugins

    with pytest.raises(
        CommandFailed, match=f"cannot check the plugins: PluginError: centralmcp plugin 'acme' .*{dist}"
    ):
        plugins.run(None, as_json=False)


def test_a_plugin_whose_plugin_toml_is_malformed_is_named_with_its_distribution(site: Path) -> None:
    package = fresh_name("acme_manifest")
    install_distribution(site, package, {"acme": package}, "schema_version = 2\n", distribution="acme-manifest")
    with pytest.raises(ManifestError) as refused:
        hosting.install(_compat.new_server("malformed"), InlineHost())
    assert str(refused.value) == (
        f"centralmcp plugin 'acme' of acme-manifest 1.0: {package}/plugin.toml: schema_version must be 1. "
        "Upgrade or fix acme-manifest, or uninstall it (pip uninstall acme-manifest)"
    )


REGISTERS_A_TOOL = (
    HOOKIMPL + "@hookimpl\ndef centralmcp_register_tools(server):\n"
    "    def {tool}(query: str) -> str:\n        return 'acme'\n\n"
    "    server.add_tool({tool}, name='{tool}', description='acme')\n"
)


def test_a_plugin_whose_register_tools_raises_is_named(site: Path) -> None:
    source = (
        HOOKIMPL + "@hookimpl\ndef centralmcp_register_tools(server):\n    raise ValueError('acme needs ACME_URL')\n"
    )
    dist, value = install_plugin(site, "acme_register", source)
    with pytest.raises(PluginError) as refused:
        hosting.install(_compat.new_server("broken-plugin"), InlineHost())
    assert str(refused.value) == (
        f"centralmcp plugin 'acme' (entry point {value} of {dist} 1.0) failed to register its tools: "
        f"ValueError: acme needs ACME_URL. Upgrade or fix {dist}, or uninstall it (pip uninstall {dist})"
    )


def test_a_plugin_tool_named_as_one_the_host_publishes_is_refused_not_dropped(site: Path) -> None:
    # Both SDK lines keep the first tool and only log "Tool already exists": the plugin's would vanish.
    dist, value = install_plugin(site, "acme_clash", REGISTERS_A_TOOL.format(tool="find_tool"))
    server = _compat.new_server("clash")

    def find_tool(query: str) -> str:
        return "host"

    _compat.add_tool(server, find_tool, name="find_tool", description="the host's", annotations={})
    with pytest.raises(PluginError) as refused:
        hosting.install(server, InlineHost())
    assert str(refused.value) == (
        f"centralmcp plugin 'acme' (entry point {value} of {dist} 1.0) cannot add its tool: the server already "
        f"publishes 'find_tool', registered by the host, and keeps one tool per name. "
        f"Upgrade or fix {dist}, or uninstall it (pip uninstall {dist})"
    )
    assert {tool.name: tool.description for tool in _compat.server_tools(server)}["find_tool"] == "the host's"


@pytest.mark.parametrize("found", ["first", "last"])
def test_a_plugin_that_also_publishes_the_batch_tool_names_both_plugins(
    request: pytest.FixtureRequest, found: str
) -> None:
    # Found first or last on the path, its register_tools runs after or before the batch plugin's.
    where = request.getfixturevalue("site" if found == "first" else "late_site")
    dist, _ = install_plugin(where, "acme_batch", REGISTERS_A_TOOL.format(tool="invoke_read_tool_batch"))
    with pytest.raises(PluginError) as refused:
        hosting.install(_compat.new_server("two-batches"), InlineHost())
    told = str(refused.value)
    assert "cannot add its tool: the server already publishes 'invoke_read_tool_batch', registered by " in told
    assert "centralmcp plugin 'acme'" in told and "centralmcp plugin 'batch'" in told
    assert f"pip uninstall {dist}" in told and "pip uninstall centralmcp-batch" in told


@pytest.mark.parametrize("found", ["first", "last"])
def test_two_distributions_giving_the_batch_entry_point_name_stop_the_start_up(
    request: pytest.FixtureRequest, found: str
) -> None:
    # Pluggy loads the first and skips the other unseen: found first, the batch tool was silently missing.
    where = request.getfixturevalue("site" if found == "first" else "late_site")
    dist, value = install_plugin(where, "acme_samename", "", name="batch")
    server = _compat.new_server("same-name")
    with pytest.raises(PluginError) as refused:
        hosting.install(server, InlineHost())
    told = str(refused.value)
    assert told.startswith("two distributions give the 'centralmcp' entry point 'batch': ")
    assert f"{dist} 1.0 ({value})" in told and "centralmcp-batch" in told and "(centralmcp_batch.plugin)" in told
    assert f"pip uninstall {dist}" in told and "pip uninstall centralmcp-batch" in told


def test_one_distribution_found_twice_on_the_path_loads_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = fresh_name("acme_twice")
    for copy in ("user-site", "venv"):
        install_distribution(tmp_path / copy, package, {"acme": package}, distribution="Acme_Twice")
        monkeypatch.syspath_prepend(str(tmp_path / copy))
    pm = hosting.install(_compat.new_server("twice"), InlineHost())
    assert [report.distribution for report in hosting.plugin_reports(pm) if report.name == "acme"] == ["Acme_Twice"]


def test_a_plugin_that_registers_none_of_its_hooks_is_reported_inactive(site: Path) -> None:
    # As the otel plugin without opentelemetry: it loads, implements nothing, and does nothing.
    package = fresh_name("acme_inactive")
    toml = (
        f'schema_version = 1\n[plugin]\nname = "acme"\ndistribution = "{package}"\ngroup = "centralmcp"\n'
        f'entry_point = "{package}"\n[hooks]\nimplements = ["centralmcp_batch_completed"]\n'
    )
    install_distribution(site, package, {"acme": package}, toml, modules={"__init__": "AVAILABLE = False\n"})
    pm = hosting.install(_compat.new_server("inactive"), InlineHost())
    reports = {report.name: report for report in hosting.plugin_reports(pm)}
    assert reports["acme"].inactive and reports["acme"].registered == ()
    assert not reports["batch"].inactive and reports["batch"].registered == ("centralmcp_register_tools",)
    assert "  inactive:    it implements none of these here" in plugin_report.report_text(reports["acme"])
    assert plugin_report.report_json(reports["acme"])["inactive"] is True


# -- safety properties a discovered plugin must not weaken ---------------------------------

PERMISSIVE_GATES = {
    "def": HOOKIMPL + "@hookimpl\ndef centralmcp_read_gate(tool):\n    return None\n",
    "async def": HOOKIMPL + "@hookimpl\nasync def centralmcp_read_gate(tool):\n    return None\n",
}


@pytest.mark.anyio
@pytest.mark.parametrize("kind", PERMISSIVE_GATES)
async def test_an_installed_gate_that_allows_everything_cannot_widen_the_routers_gate(site: Path, kind: str) -> None:
    # Discovered after the router's own gate, it is asked first: its None must not end the question.
    install_plugin(site, "acme_permissive", PERMISSIVE_GATES[kind])
    router = demo_router()
    async with router.connected():
        calls = [{"name": "list_sites"}, {"name": "delete_site", "arguments": {"site_id": "site-sjc"}}]
        batch = (await call(router.server, "invoke_read_tool_batch", {"calls": calls})).structured
        single = await call(router.server, "invoke_read_tool", {"name": "delete_site", "arguments": {"site_id": "x"}})
    assert [item["status"] for item in batch["results"]] == ["ok", "blocked"]
    assert "not read-only" in single.text


BROKEN_LIMITERS = {
    # Pluggy calls an implementation with an argument default itself, and the rest go with it on a raise.
    "argument-with-a-default": HOOKIMPL
    + "@hookimpl\ndef centralmcp_acquire_rate_token(tool, cost=1):\n    raise ConnectionError('acme store down')\n",
    # A wrapper on the hook made pluggy make the whole call, with the same rule.
    "beside-a-wrapper": HOOKIMPL
    + "class Timing:\n    @hookimpl(wrapper=True)\n    def centralmcp_acquire_rate_token(self, tool):\n"
    + "        return (yield)\n\n\nclass Limiter:\n    @hookimpl\n    def centralmcp_acquire_rate_token(self, tool):\n"
    + "        raise ConnectionError('acme store down')\n\n\ntiming, limiter = Timing(), Limiter()\n",
}


@pytest.mark.anyio
@pytest.mark.usefixtures("each_entry_its_own_call")
@pytest.mark.parametrize("kind", BROKEN_LIMITERS)
async def test_an_installed_limiter_that_raises_never_costs_the_hosts_limiter_its_token(
    site: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    package = fresh_name("acme_limiter")
    modules = {"__init__": BROKEN_LIMITERS[kind]}
    if kind == "beside-a-wrapper":
        install_distribution(
            site, package, {"acme_timing": f"{package}:timing", "acme": f"{package}:limiter"}, None, modules=modules
        )
    else:
        install_distribution(site, package, {"acme": package}, modules=modules)
    host = sample_host()
    server = _compat.new_server("limited")
    hosting.install(server, host)
    with caplog.at_level(logging.WARNING, logger="centralmcp_batch.host"):
        answer = await call(server, "invoke_read_tool_batch", {"calls": [{"name": "echo"}, {"name": "echo"}]})
    assert answer.structured["ok"] is True
    assert host.tokens == ["echo", "echo"]  # the host's own limiter drew for each backend call
    assert "centralmcp_acquire_rate_token of plugin 'acme' failed for 'echo'; proceeding" in caplog.text


# -- what the reference router's operator sees on stdio ------------------------------------


def serve_stdio(site: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """``centralmcp-batch serve --demo`` as an MCP client app starts it, stdin closed at once."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    env["PYTHONWARNINGS"] = "ignore"  # mcp 1.28 itself writes a pydantic-settings warning first: not ours to count
    command = [sys.executable, "-m", "centralmcp_batch", "serve", "--demo", *options]
    return subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize(
    ("stem", "source", "name", "what"),
    [
        ("acme_unloadable", "import centralmcp_no_such_module\n", "acme", "cannot be loaded: ModuleNotFoundError"),
        ("acme_samename", "", "batch", "two distributions give the 'centralmcp' entry point 'batch'"),
    ],
)
def test_serve_on_stdio_exits_1_with_one_line_naming_the_broken_distribution(
    tmp_path: Path, stem: str, source: str, name: str, what: str
) -> None:
    dist, _ = install_plugin(tmp_path, stem, source, name=name)
    finished = serve_stdio(tmp_path)
    assert finished.returncode == 1 and finished.stdout == ""
    (line,) = finished.stderr.splitlines()
    assert line.startswith("centralmcp-batch: error: cannot start the router: PluginError: ")
    assert what in line and dist in line and f"pip uninstall {dist}" in line
    debug = serve_stdio(tmp_path, "--log-level", "debug")
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.splitlines()[-1] == line


def test_serve_on_stdio_with_a_permissive_installed_gate_still_blocks_writes(tmp_path: Path) -> None:
    install_plugin(tmp_path, "acme_permissive", PERMISSIVE_GATES["def"])
    script = (
        "import anyio, json, sys\n"
        "from centralmcp_batch import _compat\n"
        "async def main():\n"
        "    command = _compat.StdioServerParameters(command=sys.executable,\n"
        "        args=['-m', 'centralmcp_batch', 'serve', '--demo', '--log-level', 'warning'])\n"
        "    async with _compat.connect(command) as client:\n"
        "        calls = [{'name': 'list_sites'}, {'name': 'delete_site', 'arguments': {'site_id': 'site-sjc'}}]\n"
        "        answer = (await client.call_tool('invoke_read_tool_batch', {'calls': calls})).payload\n"
        "        print(json.dumps([item['status'] for item in answer['results']]))\n"
        "anyio.run(main)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path), demo.LATENCY_ENV: "0"}
    finished = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.splitlines()[-1] == '["ok", "blocked"]'
