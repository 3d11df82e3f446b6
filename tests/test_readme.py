"""The README stays a true front page: short, its Quick start and demo sample real, its links alive.

What the README used to hold in full (hooks, settings, the batch contract) lives in docs/ now, and
tests/test_docs.py holds those pages to the code.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from centralmcp_batch.commands.demo.script import demo_calls

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAX_LINES = 200


def section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.S | re.M)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


def fenced(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.S | re.M)


def test_quick_start_is_the_two_commands_install_and_demo_then_tests() -> None:
    blocks = fenced(section("Quick start"), "sh")
    assert len(blocks) == 1
    commands = [line for line in blocks[0].splitlines() if line.strip()]
    assert commands == ["pip install . && centralmcp-batch demo", "pip install -e '.[test]' && pytest"]


def test_readme_is_a_front_page_of_at_most_200_lines() -> None:
    lines = README.splitlines()
    assert 0 < len(lines) <= MAX_LINES, len(lines)


def test_every_relative_link_points_to_a_file_in_the_repository() -> None:
    targets = re.findall(r"\]\(([^)\s]+)\)", README)
    relative = [target for target in targets if not re.match(r"[a-z]+:|#", target)]
    assert len(relative) >= 10  # the front page links to the docs pages, not to nothing
    missing = [target for target in relative if not (ROOT / target.split("#", 1)[0]).is_file()]
    assert not missing, missing
    linked = {target.split("#", 1)[0] for target in relative}
    pages = {str(page.relative_to(ROOT)) for page in (ROOT / "docs").rglob("*.md")}
    assert pages - {"docs/changelog.md"} <= linked, "a docs page the front page does not link to"


def test_the_demo_sample_shows_the_batch_the_demo_sends() -> None:
    """Each of the demo's calls is a row of the sample's table, with its id, tool and expected status."""
    sample = fenced(section("What the demo prints"), "text")
    assert len(sample) == 1
    rows = {}
    for line in sample[0].splitlines():
        cells = line.split()
        if len(cells) >= 5 and cells[0].isdigit():
            rows[cells[1]] = (int(cells[0]), cells[2], cells[4])
    calls = demo_calls()
    assert rows == {call.id: (index, call.name, call.expected) for index, call in enumerate(calls)}
    succeeded = sum(call.expected == "ok" for call in calls)
    assert f"succeeded={succeeded}/{len(calls)}" in sample[0]


def test_the_readme_shows_the_adoption_the_centralmcp_guide_shows() -> None:
    """tests/test_adapter_centralmcp.py runs the README's two lines; the guide must show the same two."""
    readme_lines = fenced(section("Using it with CentralMCP"), "python")[0]
    guide_lines = fenced((ROOT / "docs" / "guides" / "centralmcp.md").read_text(encoding="utf-8"), "python")[0]
    assert readme_lines == guide_lines
    assert len(readme_lines.strip().splitlines()) == 2


def test_ci_runs_the_readme_test_commands_on_both_sdk_lines() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "-e '.[test]'" in ci and "pytest" in ci and "mcp>=1.28,<2" in ci
    development = fenced(section("Development"), "sh")[0]
    assert "pip install -e '.[test]' && pytest" in development
    assert "pip install 'mcp>=1.28,<2' && pytest" in development
    assert "bash .ci/run" in development and "mkdocs build --strict" in development


def test_ci_runs_the_slow_tier_a_plain_run_leaves_out() -> None:
    """A plain `pytest` leaves the slow tier out (pyproject's addopts); CI's test legs run it; the README says how."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    addopts = shlex.split(pyproject["tool"]["pytest"]["ini_options"]["addopts"])
    assert addopts[addopts.index("-m") + 1] == "not slow" and "-n" in addopts
    for script in ("run", "lowest"):
        assert "pytest -m slow" in (ROOT / ".ci" / script).read_text(encoding="utf-8"), script
    assert "pytest -m slow" in fenced(section("Development"), "sh")[0]


def test_the_layout_names_every_module_and_subpackage_of_the_package() -> None:
    """Modules came one by one and the layout paragraph missed some (worker_threads.py, hookspecs.py)."""
    layout = section("Development").partition("Layout:")[2]
    assert layout, "the Development section has no 'Layout:' paragraph"
    package = ROOT / "centralmcp_batch"
    modules = [path.name for path in package.glob("*.py") if path.stem not in ("__init__", "__main__")]
    subpackages = [f"{path.name}/" for path in package.iterdir() if (path / "__init__.py").is_file()]
    assert len(modules) >= 15 and "router/" in subpackages  # the search found the package, not nothing
    missing = sorted(name for name in modules + subpackages if f"`{name}" not in layout)
    assert not missing, missing
