"""``python -m centralmcp_batch.bench``: the benchmark, and the router subprocess it starts."""

from .cli import main

raise SystemExit(main())
