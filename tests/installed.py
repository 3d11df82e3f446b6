"""Installed distributions for discovery tests: a package and its ``.dist-info`` on a directory of sys.path.

``importlib.metadata`` (so pluggy, and ``hosting``) finds them as it finds what pip installs: the
same ``METADATA`` and ``entry_points.txt`` beside the package, in a directory of the path. Put the
directory on ``sys.path`` (``monkeypatch.syspath_prepend``) or on a subprocess's ``PYTHONPATH``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path

_fresh = itertools.count()

OBSERVER = """\
from centralmcp_batch.hookspecs import hookimpl


@hookimpl
def centralmcp_batch_completed(response, seconds):
    pass
"""


def fresh_name(stem: str) -> str:
    """A package name no earlier test imported: a module stays in sys.modules once imported."""
    return f"{stem}_{next(_fresh)}"


def install_distribution(
    site: Path,
    package: str,
    entry_points: Mapping[str, str],
    plugin_toml: str | None = None,
    *,
    modules: Mapping[str, str] | None = None,
    distribution: str | None = None,
    version: str = "1.0",
) -> str:
    """Install ``package`` as the distribution ``distribution`` (default: named as the package) in ``site``.

    ``modules`` maps a module of the package (``__init__`` included) to its source; without it each
    entry point's module is a small observer. Answers the distribution's name.
    """
    (site / package).mkdir(parents=True)
    sources = dict(modules) if modules is not None else {}
    if modules is None:
        for value in entry_points.values():
            sources[value.split(":")[0].split(".")[-1]] = OBSERVER
    sources.setdefault("__init__", "")
    for module, source in sources.items():
        (site / package / f"{module}.py").write_text(source)
    if plugin_toml is not None:
        (site / package / "plugin.toml").write_text(plugin_toml)
    name = distribution or package
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = [f"{entry} = {value}" for entry, value in entry_points.items()]
    (info / "entry_points.txt").write_text("[centralmcp]\n" + "\n".join(lines) + "\n")
    return name
