"""The reference router: the embedded default host for the ``centralmcp`` plugins."""

from .backends import HttpBackend, StdioBackend
from .catalog import BackendOptions, capability
from .core import Router

__all__ = ["BackendOptions", "HttpBackend", "Router", "StdioBackend", "capability"]
