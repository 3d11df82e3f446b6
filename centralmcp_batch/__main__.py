"""``python -m centralmcp_batch``: the same command as ``centralmcp-batch``."""

from .cli import main

raise SystemExit(main())
