"""The README stays true: Quick start, every hook spec, every environment variable."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from centralmcp_batch import hookspecs, settings

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.S | re.M)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


def test_quick_start_is_two_commands_install_and_demo_then_tests() -> None:
    block = re.search(r"```sh\n(.*?)```", section("Quick start"), re.S)
    assert block
    commands = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(commands) == 2
    assert "pip install" in commands[0] and "centralmcp-batch demo" in commands[0]
    assert "pip install" in commands[1] and "[test]" in commands[1] and commands[1].rstrip().endswith("pytest")


def test_every_hookspec_is_in_the_hooks_section_with_its_arguments() -> None:
    hooks = section("Hooks")
    for name, spec in inspect.getmembers(hookspecs, inspect.isfunction):
        if name.startswith("centralmcp_"):
            arguments = ", ".join(inspect.signature(spec).parameters)
            assert f"`{name}({arguments})" in hooks, name


def test_every_batch_setting_is_in_the_configuration_section() -> None:
    configuration = section("Configuration")
    for setting in settings.SETTINGS:
        row = next((line for line in configuration.splitlines() if f"`{setting.env}`" in line), "")
        assert row, setting.env
        assert f"{setting.default:g}" in row and f"{setting.minimum:g}" in row
    assert f"`{settings.ROUTER_MODE}`" in configuration


def test_ci_runs_the_readme_test_command() -> None:
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert "-e '.[test]'" in ci and "pytest" in ci and "mcp>=1.28,<2" in ci


def test_every_environment_variable_the_package_reads_is_documented() -> None:
    package = Path(__file__).resolve().parents[1] / "centralmcp_batch"
    named = set()
    for source in package.rglob("*.py"):
        named |= set(re.findall(r"\"(CENTRALMCP_[A-Z0-9_]+)\"", source.read_text()))
    configuration = section("Configuration")
    missing = sorted(name for name in named if f"`{name}`" not in configuration)
    assert not missing, missing
