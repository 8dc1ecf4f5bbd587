"""The SDK's one core and its two drivers.

Every operation (create and wait for Ready, the token check and its
retries, fork, suspend, the sweep, exec with its argv fallback, file calls,
workspaces, per-call runs) is written once, as a generator that builds the
requests, reads the answers and decides what comes next, and does no I/O of
its own: it yields a ``Call`` naming one I/O step of its transport
(``request``, ``kube``, ``wait``, ``next``, ...) and is sent that step's
result, or has its exception thrown in. ``run`` drives such an operation on
the threaded client's transport (``_io_sync.py``), ``run_async`` on the
asyncio client's (``_io_async.py``); each transport method is a thin
wrapper over httpx, the Kubernetes client or the clock.

An operation that must clean up after a failure or a cancellation (delete
the Sandbox it made) yields its cleanup as ``shielded``: the asyncio driver
runs it to its end even when the task is being cancelled."""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Dict, Generator, Iterator, Tuple, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """One I/O step: ``transport.<name>(*args, **kw)``."""

    name: str
    args: Tuple[Any, ...] = ()
    kw: Dict[str, Any] = field(default_factory=dict)
    shielded: bool = False


# An operation: yields Calls (and, streaming, Emits), is sent their
# results, returns its value.
Op = Generator[Any, Any, T]


def call(name: str, *args: Any, **kw: Any) -> Call:
    return Call(name, args, kw)


def shielded(name: str, *args: Any, **kw: Any) -> Call:
    """A cleanup step: not cut short by a cancellation (asyncio.shield)."""
    return Call(name, args, kw, shielded=True)


class _Driven:
    """An operation being driven: ``steps()`` yields what it asks for next,
    sending it ``value`` or throwing ``error`` in (what the driver set after
    the last step); ``result`` is its value once it returned."""

    def __init__(self, op: Op[Any]) -> None:
        self._op = op
        self.value: Any = None
        self.error: Any = None
        self.result: Any = None

    def steps(self) -> Iterator[Any]:
        while True:
            value, error, self.value, self.error = self.value, self.error, None, None
            try:
                out = self._op.send(value) if error is None else self._op.throw(error)
            except StopIteration as stop:
                self.result = stop.value
                return
            yield out


@dataclass(frozen=True)
class Emit:
    """What a streaming operation hands its caller (a chunk of a file)
    before it goes on."""

    value: Any


def _perform(io: Any, step: Call) -> Tuple[Any, Any]:
    """(the step's result, None), or (None, what it raised)."""
    try:
        return getattr(io, step.name)(*step.args, **step.kw), None
    except BaseException as e:  # the operation decides: clean up, retry or raise
        return None, e


async def _perform_async(io: Any, step: Call) -> Tuple[Any, Any]:
    """As _perform; a step may be a plain function or a coroutine function."""
    try:
        value = getattr(io, step.name)(*step.args, **step.kw)
        if inspect.isawaitable(value):
            value = await (asyncio.shield(value) if step.shielded else value)
        return value, None
    except BaseException as e:
        return None, e


def iterate(op: Op[T], io: Any) -> Generator[Any, None, T]:
    """Drives ``op`` on a blocking transport, yielding what it emits; its
    value is the generator's. Closing the generator early throws
    GeneratorExit into ``op``, which closes what it opened."""
    d = _Driven(op)
    for out in d.steps():
        if not isinstance(out, Emit):
            d.value, d.error = _perform(io, out)
            continue
        try:
            yield out.value
        except BaseException as e:  # GeneratorExit: the caller stopped reading
            d.error = e
    return d.result  # type: ignore[no-any-return]


def run(op: Op[T], io: Any) -> T:
    """Drives ``op`` (which emits nothing) on a blocking transport."""
    d = _Driven(op)
    for out in d.steps():
        d.value, d.error = _perform(io, out)
    return d.result  # type: ignore[no-any-return]


async def aiterate(op: Op[Any], io: Any) -> AsyncIterator[Any]:
    """iterate() on an asyncio transport."""
    d = _Driven(op)
    for out in d.steps():
        if isinstance(out, Emit):
            try:
                yield out.value
            except BaseException as e:
                d.error = e
        else:
            d.value, d.error = await _perform_async(io, out)


async def run_async(op: Op[T], io: Any) -> T:
    """Drives ``op`` (which emits nothing) on an asyncio transport."""
    d = _Driven(op)
    for out in d.steps():
        d.value, d.error = await _perform_async(io, out)
    return d.result  # type: ignore[no-any-return]


def each(op: Op[T], take: Any) -> Op[T]:
    """Runs streaming ``op`` inside another operation, handing what it
    emits to ``take``."""
    d = _Driven(op)
    for out in d.steps():
        if isinstance(out, Emit):
            take(out.value)
            continue
        try:
            d.value = yield out
        except BaseException as e:
            d.error = e
    return d.result  # type: ignore[no-any-return]
