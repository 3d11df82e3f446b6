"""Discovery through the installed distribution, and plugin.toml held against the code."""

from __future__ import annotations

import inspect
import logging
import sys
from importlib.metadata import distribution, entry_points
from pathlib import Path
from typing import Any

import pluggy
import pytest
from installed import install_distribution

import centralmcp_batch
from centralmcp_batch import (
    HostContractError,
    ManifestError,
    ToolRef,
    _compat,
    batch_tool,
    hookspecs,
    hosting,
    manifest,
    plugin,
    settings,
)
from centralmcp_batch.hookspecs import hookimpl
from centralmcp_batch.testing import InlineHost

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SPECS = sorted(name for name, _ in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("centralmcp_"))


def test_the_entry_point_is_found_with_nothing_else_configured() -> None:
    found = [ep for ep in entry_points(group="centralmcp") if ep.name == "batch"]
    assert [ep.value for ep in found] == ["centralmcp_batch.plugin"]
    pm = pluggy.PluginManager("centralmcp")
    pm.add_hookspecs(hookspecs)
    assert pm.load_setuptools_entrypoints("centralmcp") >= 1
    assert plugin in pm.get_plugins()
    ours = [
        pm.get_name(found) for found, dist in pm.list_plugin_distinfo() if dist.metadata["name"] == "centralmcp-batch"
    ]
    assert sorted(ours) == ["batch", "otel"]


def test_the_pytest_plugin_and_console_script_are_declared() -> None:
    dist = distribution("centralmcp-batch")
    groups = {(ep.group, ep.name): ep.value for ep in dist.entry_points}
    assert groups[("pytest11", "centralmcp_batch")] == "centralmcp_batch.pytest_plugin"
    assert groups[("console_scripts", "centralmcp-batch")] == "centralmcp_batch.cli:main"


def test_the_package_exports_the_contract_types() -> None:
    assert centralmcp_batch.ToolRef is ToolRef and centralmcp_batch.__all__ == sorted(centralmcp_batch.__all__)
    assert ToolRef("t", "s", {"readOnlyHint": True}).read_only
    assert not ToolRef("t", "s", {"readOnlyHint": "yes"}).read_only
    assert ToolRef("t", None).concurrency is None


def test_the_manifest_agrees_with_pyproject_the_entry_point_and_the_code() -> None:
    own = manifest.own()
    ep = PYPROJECT["project"]["entry-points"]["centralmcp"]
    assert own.distribution == PYPROJECT["project"]["name"] == "centralmcp-batch"
    described = {found.name: found.entry_point for found in manifest.parse_all((ROOT / "plugin.toml").read_text())}
    assert own.group == hookspecs.PROJECT and ep == described == {
        own.name: own.entry_point,
        "otel": "centralmcp_batch.otel",
    }
    implemented = sorted(
        name for name, fn in vars(plugin).items() if name.startswith("centralmcp_") and hasattr(fn, "centralmcp_impl")
    )
    assert list(own.implements) == implemented
    host_side = [
        "centralmcp_acquire_rate_token",
        "centralmcp_dispatch_read",
        "centralmcp_find_tool",
        "centralmcp_read_gate",
        "centralmcp_reserve_rate_tokens",
        "centralmcp_resume_cursor",
    ]
    assert sorted(own.requires + own.optional) == host_side
    assert set(own.requires + own.optional + own.implements) <= set(SPECS)
    assert [dict(tool) for tool in own.tools] == [{"name": batch_tool.TOOL_NAME, "capability": "read"}]
    declared = {entry["env"]: (entry["default"], entry["minimum"], entry.get("maximum")) for entry in own.settings}
    assert declared == {s.env: (s.default, s.minimum, s.maximum) for s in settings.SETTINGS}


def implemented_hooks(module: object) -> list[str]:
    return sorted(
        name for name, fn in vars(module).items() if name.startswith("centralmcp_") and hasattr(fn, "centralmcp_impl")
    )


def test_the_otel_manifest_agrees_with_the_otel_module() -> None:
    from centralmcp_batch import otel

    assert otel.AVAILABLE, "the test extra installs opentelemetry, so the observer's hooks exist"
    found = manifest.for_entry_point("centralmcp_batch.otel")
    assert found is not None and found.name == "otel" and found.distribution == "centralmcp-batch"
    assert sorted(found.implements) == implemented_hooks(otel)
    assert found.requires == found.optional == found.tools == found.settings == ()
    assert set(found.implements) <= set(SPECS)


def test_every_installed_plugin_of_ours_gets_its_own_manifest_and_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    pm = hosting.plugin_manager(InlineHost())
    pm.load_setuptools_entrypoints(hookspecs.PROJECT)
    with caplog.at_level(logging.WARNING, logger=hosting.__name__):
        reports = {
            report.name: report for report in hosting.plugin_reports(pm) if report.distribution == "centralmcp-batch"
        }
    assert caplog.records == []
    assert {name: report.manifest.entry_point for name, report in reports.items() if report.manifest} == {
        "batch": "centralmcp_batch.plugin",
        "otel": "centralmcp_batch.otel",
    }
    assert reports["otel"].manifest is not None and reports["otel"].manifest.tools == ()
    assert all(report.satisfied for report in reports.values())


def test_a_manifest_applies_only_to_the_entry_point_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # One distribution, two entry points in one package, a manifest for the first only: the second must
    # not borrow it (its host requirements are unknown, which the host is told).
    toml = (
        'schema_version = 1\n[plugin]\nname = "acme_main"\ndistribution = "acme_obs"\ngroup = "centralmcp"\n'
        'entry_point = "acme_obs.main"\n[hooks]\nimplements = ["centralmcp_batch_completed"]\n'
        'requires = ["centralmcp_find_tool"]\n'
    )
    install_distribution(tmp_path, "acme_obs", {"acme_main": "acme_obs.main", "acme_extra": "acme_obs.extra"}, toml)
    monkeypatch.syspath_prepend(str(tmp_path))
    pm = hosting.plugin_manager(InlineHost())
    pm.load_setuptools_entrypoints(hookspecs.PROJECT)
    with caplog.at_level(logging.WARNING, logger=hosting.__name__):
        reports = {report.name: report for report in hosting.plugin_reports(pm)}
    main, extra = reports["acme_main"], reports["acme_extra"]
    assert (
        main.distribution == "acme_obs"
        and main.manifest is not None
        and main.manifest.requires == ("centralmcp_find_tool",)
    )
    assert extra.distribution == "acme_obs" and extra.manifest is None
    assert [record.getMessage() for record in caplog.records] == [
        "centralmcp plugin 'acme_extra' ships no plugin.toml; its host requirements are not checked"
    ]


def test_a_manifest_may_describe_every_entry_point_of_its_distribution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toml = (
        'schema_version = 1\n[plugin]\nname = "b_main"\ndistribution = "acme_two"\ngroup = "centralmcp"\n'
        'entry_point = "acme_two.main"\n[hooks]\nimplements = ["centralmcp_batch_completed"]\n'
        '[[plugins]]\nname = "b_extra"\nentry_point = "acme_two.extra:centralmcp_batch_completed"\n'
        '[plugins.hooks]\nimplements = ["centralmcp_batch_completed"]\nrequires = ["centralmcp_dispatch_read"]\n'
    )
    install_distribution(
        tmp_path, "acme_two", {"b_main": "acme_two.main", "b_extra": "acme_two.extra:centralmcp_batch_completed"}, toml
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    pm = hosting.plugin_manager(NoDispatch())
    pm.load_setuptools_entrypoints(hookspecs.PROJECT)
    reports = {report.name: report for report in hosting.plugin_reports(pm)}
    assert reports["b_main"].satisfied and reports["b_main"].manifest is not None
    extra = reports["b_extra"]
    assert (
        extra.manifest is not None
        and extra.manifest.distribution == "acme_two"
        and extra.manifest.source.endswith("plugin.toml")
    )
    assert extra.missing == ("centralmcp_dispatch_read",)
    with pytest.raises(HostContractError, match="plugin 'b_extra' requires host hook 'centralmcp_dispatch_read'"):
        extra.raise_if_unsatisfied()


def test_the_manifest_ships_with_the_package() -> None:
    """Inside the wheel when installed, beside the package in a source checkout."""
    source = Path(manifest.own().source)
    packaged = Path(centralmcp_batch.__file__).parent / "plugin.toml"
    assert packaged.is_file() or source == ROOT / "plugin.toml"


class NoDispatch:
    @hookimpl
    def centralmcp_find_tool(self, name: str) -> ToolRef | None:
        return None

    @hookimpl
    def centralmcp_read_gate(self, tool: ToolRef) -> str | None:
        return None


class NoGate(InlineHost):
    centralmcp_read_gate = None  # type: ignore[assignment]


@pytest.mark.parametrize(
    ("host", "hook"), [(NoDispatch(), "centralmcp_dispatch_read"), (NoGate(), "centralmcp_read_gate")]
)
def test_a_missing_required_host_hook_is_a_startup_error_naming_it(host: Any, hook: str) -> None:
    server = _compat.new_server("incomplete")
    with pytest.raises(HostContractError, match=f"plugin 'batch' requires host hook '{hook}'"):
        hosting.install(server, host)
    assert not _compat.has_tool(server, batch_tool.TOOL_NAME)


def test_several_missing_host_hooks_are_named_in_the_plural() -> None:
    with pytest.raises(HostContractError, match=r"plugin 'batch' requires host hooks 'centralmcp_\w+', 'centralmcp_"):
        hosting.install(_compat.new_server("no host at all"))


def test_an_implementation_without_a_spec_is_an_error() -> None:
    class Typo(InlineHost):
        @hookimpl
        def centralmcp_find_tools(self, name: str) -> None:  # the spec is centralmcp_find_tool
            return None

    with pytest.raises(pluggy.PluginValidationError):
        hosting.install(_compat.new_server("typo"), Typo())


def test_every_hookspec_is_documented() -> None:
    for name in SPECS:
        doc = getattr(hookspecs, name).__doc__ or ""
        assert len(doc.strip()) > 40, name


MAIN = (
    'schema_version = 1\n[plugin]\nname = "x"\ndistribution = "x"\ngroup = "centralmcp"\nentry_point = "x.p"\n[hooks]\n'
)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("schema_version = 2", "schema_version must be 1"),
        ("schema_version = 1", "missing [plugin] table"),
        ("not toml = = =", "not valid TOML"),
        ('schema_version = 1\n[plugin]\nname = "x"\n[hooks]', "'distribution' must be a non-empty string"),
        (MAIN + '[[plugins]]\nname = "y"\nentry_point = "x.y"\n', "[[plugins]] 'y': missing [hooks] table"),
        ("plugins = 3\n" + MAIN, "plugins must be an array of tables"),
        (
            MAIN + '[[plugins]]\nname = "y"\nentry_point = "x.p"\n[plugins.hooks]\n',
            "two plugins with the same entry_point: ['x.p']",
        ),
        (
            MAIN + '[[plugins]]\nname = "y"\ndistribution = "z"\nentry_point = "x.y"\n[plugins.hooks]\n',
            "distribution must be the main",
        ),
    ],
)
def test_malformed_manifests_are_refused(text: str, problem: str) -> None:
    with pytest.raises(ManifestError) as refused:
        manifest.parse(text, "bad.toml")
    assert str(refused.value).startswith("bad.toml") and problem in str(refused.value)
