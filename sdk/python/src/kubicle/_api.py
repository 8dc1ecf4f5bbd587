"""What the threaded and the asyncio client share above the transport:
their defaults (and, as the core grows, the logic of their calls)."""

from __future__ import annotations

DEFAULT_CREATE_TIMEOUT = 120.0
DEFAULT_DELETE_TIMEOUT = 120.0
DEFAULT_SUSPEND_TIMEOUT = 300.0  # a snapshot of a large guest is written to the node's disk
