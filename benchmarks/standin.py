"""CentralMCP's router as the benchmarks load it: a fresh copy of the stand-in over the benchmark backend.

The stand-in (``tests/standins/centralmcp_router.py``) models CentralMCP's ``tool_router.py``: its
catalog, gate, dispatch rate gate and, outside minimal mode, its own sequential
``invoke_read_tool_batch`` (the built-in). Importing this module puts ``benchmarks/`` (the backend)
and ``tests/`` (the stand-ins) on ``sys.path``, so it runs from a checkout only.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
for _path in (str(HERE.parent / "tests"), str(HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import baseline_backend as backend  # noqa: E402 - after the path is set

from centralmcp_batch import bench  # noqa: E402

__all__ = ["STANDIN", "backend", "load_router"]

STANDIN = HERE.parent / "tests" / "standins" / "centralmcp_router.py"


def load_router(mode: str, label: str) -> ModuleType:
    """A fresh copy of the stand-in router in ``mode`` (``default``: with its built-in batch; ``minimal``:
    without), named after ``label``, whose one backend ``bench`` is ``baseline_backend``.

    No rate gate is installed: the caller gives each copy the limits it measures.
    """
    spec = importlib.util.spec_from_file_location(f"standin_router_{label}", STANDIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with bench.environment(CENTRALMCP_ROUTER_MODE=mode):  # the router reads it as it is imported
        spec.loader.exec_module(module)
    module._BACKENDS = {"bench": "baseline_backend"}
    module._load_all_backends()
    return module
