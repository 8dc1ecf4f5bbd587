"""Metadata <-> labels: ``{"run": "r1"}`` is label ``kubicle.dev/run=r1``
(docs/api.md). A key that already has a prefix (``team.example/x``) is used
as it is."""

from __future__ import annotations

import re
from typing import Dict, Mapping, Optional

PREFIX = "kubicle.dev/"
RUN = PREFIX + "run"
AGENT = PREFIX + "agent"
TEMPLATE = PREFIX + "template"
NODE = PREFIX + "node"
FORK_OF = PREFIX + "fork-of"

_NAME = re.compile(r"^[A-Za-z0-9]([-_.A-Za-z0-9]{0,61}[A-Za-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def label_key(key: str) -> str:
    if not key:
        raise ValueError("metadata keys must not be empty")
    return key if "/" in key else PREFIX + key


def _check(key: str, value: str) -> None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not all(_DNS_LABEL.match(p) for p in prefix.split("."))):
        raise ValueError(f"label key {key!r} has an invalid prefix")
    if not _NAME.match(name):
        raise ValueError(f"label key {key!r} is not a valid label name")
    if value and not _NAME.match(value):
        raise ValueError(f"label value {value!r} of {key!r} is not a valid label value "
                         "(at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends)")


def to_labels(metadata: Optional[Mapping[str, str]]) -> Dict[str, str]:
    """The labels for ``metadata``; raises ValueError for what Kubernetes refuses."""
    out: Dict[str, str] = {}
    for k, v in (metadata or {}).items():
        if not isinstance(v, str):
            raise ValueError(f"metadata value of {k!r} must be a string, not {type(v).__name__}")
        key = label_key(k)
        _check(key, v)
        out[key] = v
    return out


def to_metadata(labels: Optional[Mapping[str, str]]) -> Dict[str, str]:
    return {k[len(PREFIX):]: v for k, v in (labels or {}).items() if k.startswith(PREFIX)}


def selector(metadata: Optional[Mapping[str, str]]) -> str:
    """An equality label selector: ``kubicle.dev/run=r1,kubicle.dev/agent=a``."""
    return ",".join(f"{k}={v}" for k, v in sorted(to_labels(metadata).items()))
