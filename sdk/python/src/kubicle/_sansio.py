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
from typing import Any, AsyncIterator, Dict, Generator, Tuple, TypeVar

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


def _advance(op: Op[Any], value: Any, error: Any) -> Tuple[bool, Any]:
    """(True, the operation's value) once it returns, else (False, its next Call)."""
    try:
        return False, (op.send(value) if error is None else op.throw(error))
    except StopIteration as stop:
        return True, stop.value


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
    value, error = None, None
    while True:
        done, out = _advance(op, value, error)
        if done:
            return out  # type: ignore[no-any-return]
        if isinstance(out, Emit):
            value, error = None, (yield from _hand_over(out.value))
        else:
            value, error = _perform(io, out)


def _hand_over(value: Any) -> Generator[Any, None, Any]:
    """Yields ``value`` to the caller; what the caller threw in instead of
    taking the next one (GeneratorExit: it stopped early), else None."""
    try:
        yield value
    except BaseException as e:
        return e
    return None


def run(op: Op[T], io: Any) -> T:
    """Drives ``op`` (which emits nothing) on a blocking transport."""
    steps = iterate(op, io)
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


async def aiterate(op: Op[Any], io: Any) -> AsyncIterator[Any]:
    """iterate() on an asyncio transport."""
    value, error = None, None
    while True:
        done, out = _advance(op, value, error)
        if done:
            return
        if not isinstance(out, Emit):
            value, error = await _perform_async(io, out)
            continue
        value = error = None
        try:
            yield out.value
        except BaseException as e:
            error = e


async def run_async(op: Op[T], io: Any) -> T:
    """Drives ``op`` (which emits nothing) on an asyncio transport."""
    value, error = None, None
    while True:
        done, out = _advance(op, value, error)
        if done:
            return out  # type: ignore[no-any-return]
        value, error = await _perform_async(io, out)


def each(op: Op[T], take: Any) -> Op[T]:
    """Runs streaming ``op`` inside another operation, handing what it
    emits to ``take``."""
    value, error = None, None
    while True:
        done, out = _advance(op, value, error)
        if done:
            return out  # type: ignore[no-any-return]
        value, error = None, None
        if isinstance(out, Emit):
            take(out.value)
            continue
        try:
            value = yield out
        except BaseException as e:
            error = e
