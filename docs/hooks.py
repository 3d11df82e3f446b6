"""MkDocs hook: the tables that must not drift, generated from the code and plugin.toml at build time.

A page asks for one with a marker line, ``<!-- generated: settings -->`` or ``<!-- generated: hooks -->``.
The settings table comes from ``centralmcp_batch.settings.SETTINGS`` (names, defaults, ranges) and
``plugin.toml`` (what each one means); the build fails when the two disagree. The hook table comes
from the hookspecs (names, arguments, firstresult, first docstring line) and ``plugin.toml`` (who
implements and who calls each hook).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from centralmcp_batch import hookspecs, settings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- generated: {} -->"


class DocsDrift(Exception):
    """The code and plugin.toml tell different stories; fix one before the docs are built."""


def manifest_data(path: Path = ROOT / "plugin.toml") -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _number(value: float) -> str:
    return f"{value:g}" if value < 1e6 else f"{value:.0f}"


def _range(setting: settings.Setting) -> str:
    if setting.maximum is None:
        return f"{_number(setting.minimum)} and up"
    return f"{_number(setting.minimum)} to {_number(setting.maximum)}"


def _declared(entry: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    return entry.get("default"), entry.get("minimum"), entry.get("maximum")


def settings_table(manifest: Mapping[str, Any], known: Iterable[settings.Setting] = settings.SETTINGS) -> str:
    """The batch's settings: one row per ``SETTINGS`` entry, its meaning from plugin.toml."""
    declared = {entry.get("env"): entry for entry in manifest.get("settings", ())}
    rows = ["| variable | default | range | meaning |", "|---|---|---|---|"]
    for setting in known:
        entry = declared.pop(setting.env, None)
        if entry is None or _declared(entry) != (setting.default, setting.minimum, setting.maximum):
            raise DocsDrift(f"plugin.toml and settings.SETTINGS disagree about {setting.env}")
        if not entry.get("description"):
            raise DocsDrift(f"plugin.toml gives {setting.env} no description")
        rows.append(f"| `{setting.env}` | {_number(setting.default)} | {_range(setting)} | {entry['description']} |")
    if declared:
        raise DocsDrift(f"plugin.toml declares settings the code does not read: {sorted(declared)}")
    return "\n".join(rows)


def specs() -> list[tuple[str, Any]]:
    """Every hookspec, in the order the contract module defines them."""
    found = [
        (name, spec) for name, spec in vars(hookspecs).items() if name.startswith("centralmcp_") and callable(spec)
    ]
    return found


def _role(name: str, hooks: Mapping[str, Any]) -> str:
    if name in hooks.get("requires", ()):
        return "host, required"
    if name in hooks.get("optional", ()):
        return "host, optional"
    if name in hooks.get("implements", ()):
        return "plugin"
    if name in hooks.get("calls", ()):
        return "observers"
    raise DocsDrift(f"plugin.toml does not say who implements {name}")


def first_paragraph(doc: str) -> str:
    """A docstring's summary on one line: its first paragraph, which may wrap (a first line alone cut one off)."""
    return " ".join(doc.partition("\n\n")[0].split())


def hooks_table(manifest: Mapping[str, Any]) -> str:
    """One row per hookspec: its call, who implements it, how its answers combine, what it means."""
    hooks = manifest.get("hooks", {})
    rows = ["| hook | implemented by | answers | meaning |", "|---|---|---|---|"]
    for name, spec in specs():
        arguments = ", ".join(inspect.signature(spec).parameters)
        firstresult = getattr(spec, f"{hookspecs.PROJECT}_spec", {}).get("firstresult", False)
        summary = first_paragraph(inspect.getdoc(spec) or "")
        if not summary:
            raise DocsDrift(f"hookspec {name} has no docstring")
        answers = "the first that is not None" if firstresult else "every implementation"
        reference = f"[`{name}({arguments})`](#centralmcp_batch.hookspecs.{name})"
        rows.append(f"| {reference} | {_role(name, hooks)} | {answers} | {summary} |")
    return "\n".join(rows)


def render(markdown: str, manifest: Mapping[str, Any]) -> str:
    """``markdown`` with every marker line replaced by its table."""
    for name, table in (("settings", settings_table), ("hooks", hooks_table)):
        marker = MARKER.format(name)
        if marker in markdown:
            markdown = markdown.replace(marker, table(manifest))
    return markdown


def on_page_markdown(markdown: str, **_: Any) -> str:
    from mkdocs.exceptions import PluginError  # only the docs build has mkdocs; the tests import this module too

    try:
        return render(markdown, manifest_data())
    except DocsDrift as exc:
        raise PluginError(f"docs/hooks.py: {exc}") from exc
