"""The one error a store raises: it cannot serve a reservation now (the limiter falls back)."""

from __future__ import annotations


class StoreUnavailable(Exception):
    """The store cannot be reached or used; the message says which store and why."""
