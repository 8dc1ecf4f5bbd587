"""What a client knows about one sandbox: its description, the object it
came from, and how to reach its data plane once resolved."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from .models import SandboxInfo


@dataclass
class Ref:
    info: SandboxInfo
    raw: Dict[str, Any]
    base: Optional[str] = None     # <scheme>://<node>/v1/sandboxes/<id>
    token: Optional[str] = None    # the data-plane bearer token
    # The pooled client that verifies this sandbox's node (its Lease's CA);
    # None: the Kubicle client's own.
    http: Any = None
    # The TLS context that verifies this sandbox's node, for raw streams
    # (port streams: httpx cannot carry them); None: the client's own.
    ssl: Any = None
    # Standalone node only: the create's env, sent with every exec (the
    # node's create API takes none).
    env: Dict[str, str] = field(default_factory=dict)
