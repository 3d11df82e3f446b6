"""The few exceptions of the contract.

Exception
 ├── InvalidCursor          a host refuses a continuation cursor; the message becomes the item's error
 └── HostContractError      a host does not meet a plugin's manifest (a required hook is missing)
      └── ManifestError     a plugin.toml that cannot be read or is not well formed
"""

from __future__ import annotations


class InvalidCursor(Exception):
    """Raised by ``centralmcp_resume_cursor`` to refuse a cursor."""


class HostContractError(Exception):
    """A host cannot run a plugin: the message names the plugin and the hook."""


class ManifestError(HostContractError):
    """A plugin manifest that cannot be read or does not say what it must."""
