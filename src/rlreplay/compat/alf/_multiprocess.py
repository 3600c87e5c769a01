"""``allow_multiprocess=True``: one ALF buffer used from several processes (private to ALF's).

ALF puts its buffer's tensors in shared memory and guards them with a multiprocessing lock, so
the buffer a child process receives (forked, or pickled to it as a ``Process`` argument) is the
*same* buffer: what the child adds, the parent draws, and the other way round. Here the buffer's
state (the core and the front-end's bookkeeping) stays in the process that built it, the
*owner*, and every other process reaches it by remote calls:

- The owner serves its buffer with the standard library's RPC server,
  :class:`multiprocessing.managers.Server` (AF_UNIX socket, authenticated with
  ``multiprocessing.current_process().authkey``, which fork and spawn children inherit). It
  starts lazily: when the buffer is first pickled, or just before the owner forks
  (``os.register_at_fork``). Each client connection is served by its own thread, so a blocked
  call of one process never delays the calls of another.
- A forked child holds a copy of the Python object, marked right after the fork as a *handle*
  of the owner's buffer: every public method and property of the class checks for that mark
  and forwards (:func:`forward_public`). A pickled buffer unpickles as a handle: an instance
  of the same class with no state. Unpickled in the owner's process, it is the owner's buffer
  itself.
- Arguments and results travel pickled (tensors by value); a result that names the buffer
  (``BatchInfo.replay_buffer``) arrives as the receiving process's handle of it. Exceptions
  come back as they were raised. A blocking call runs in the owner in slices of
  :data:`SLICE` seconds, so a caller that dies while blocked never takes data it cannot
  receive.

The device-backed buffer (``_device``) is served the same way; it is not thread-safe itself,
so it sets :data:`CALL_LOCK` and each of its calls in the owner holds that lock.

Cost: a remote call is a round trip through a socket plus pickling both ways (see
``docs/migrating/alf.md`` for a measured rate). Calls in the owner stay direct, behind one
``__dict__`` look-up.

If the owner has gone (process ended, or its buffer was garbage collected), a remote call
raises :class:`rlreplay.ReplayClosed` at once; a call blocked at that moment raises it too.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import pickle
import socket
import threading
import time
import weakref
from collections.abc import Callable
from multiprocessing import AuthenticationError, current_process
from multiprocessing.connection import Connection
from multiprocessing.managers import BaseManager, BaseProxy, Server
from typing import Any

import torch

from rlreplay import ConfigError, ReplayClosed, ReplayError, ReplayTimeout
from rlreplay.buffer import check_timeout

__all__ = ["CALL_LOCK", "SLICE", "Remote", "Sharing", "forward_public", "reduce"]

SLICE = 0.25  # seconds: longest wait of a blocking remote call before it checks its caller
TYPEID = "alf_replay_buffer"
SERVING = "rlreplay-alf-serving"  # name prefix of the owner's threads that serve a client
CALL_LOCK = "_call_lock"  # a buffer's lock around each of its calls in the owner (if set)
FORWARDS = "__rlreplay_forwards__"  # marks the forwarding wrappers
# properties that hand out the owner's own storage objects: not forwarded
LOCAL = ("core", "device_buffer")

# Owner buffers of this process that allow_multiprocess (started or not).
_live: weakref.WeakSet[Any] = weakref.WeakSet()
# Server address -> this process's object for that buffer (the owner, a forked copy, a handle).
_handles: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
_handles_lock = threading.Lock()
_serving = threading.local()  # .conn: the connection a server thread answers
_servers: set[_Server] = set()  # this process's running servers


# ---------------------------------------------------------------------------------- owner side
class _Server(Server):
    """The stdlib manager server, remembering per thread the connection it serves."""

    listener: Any  # set by Server.__init__ (untyped in typeshed)
    stop_event: threading.Event  # Server.serve_forever sets it; we run our own accept loop
    conns: set[Connection]  # the connections being served (closed in forked children)

    def serve_client(self, conn: Connection) -> None:
        thread = threading.current_thread()  # named after the client process by the server
        thread.name = f"{SERVING} {thread.name}"
        _serving.conn = conn
        super().serve_client(conn)


def _caller_gone() -> bool:
    """Whether the client of this server thread has closed its connection.

    The protocol is synchronous: while its call runs, a live client sends nothing, so a
    readable connection means end of file.
    """
    conn: Connection | None = getattr(_serving, "conn", None)
    try:
        return conn is not None and conn.poll()
    except OSError:
        return True


class _Dispatcher:
    """The object the server exposes: runs one named call on the owner's buffer.

    It holds the buffer weakly, so a buffer nobody uses in its owner is collected (its remote
    users then get :class:`rlreplay.ReplayClosed`).
    """

    def __init__(self, buffer: Any) -> None:
        self._ref = weakref.ref(buffer)
        self._methods = frozenset(forwarded_methods(type(buffer)))
        self._properties = frozenset(_property_names(type(buffer))) - set(LOCAL)

    def call(self, kind: str, name: str, payload: bytes) -> tuple[bool, bytes]:
        """``(True, pickled result)`` or ``(False, pickled exception)``; never raises."""
        try:
            return True, pickle.dumps(self._run(kind, name, payload), pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # sent back as it is, raised in the caller
            try:
                return False, pickle.dumps(exc, pickle.HIGHEST_PROTOCOL)
            except Exception:
                plain = ReplayError(f"{name}: {type(exc).__name__}: {exc}")
                return False, pickle.dumps(plain, pickle.HIGHEST_PROTOCOL)

    def _run(self, kind: str, name: str, payload: bytes) -> Any:
        buffer = self._ref()
        if buffer is None:
            raise ReplayClosed(f"{name}: the ALF buffer was deleted in its owner process")
        if kind == "get" and name in self._properties:
            return getattr(buffer, name)
        if kind != "call" or name not in self._methods:
            raise ConfigError(
                f"{name}: expected a public method or property of the ALF buffer, got "
                f"{kind} {name!r}"
            )
        args, kwargs = pickle.loads(payload)
        return _sliced(getattr(buffer, name), name, args, kwargs)


def _sliced(method: Callable[..., Any], name: str, args: Any, kwargs: Any) -> Any:
    """``method(*args, **kwargs)``; a blocking call waits in slices of :data:`SLICE` s.

    Between slices it checks that the caller still waits for the result: a blocked
    ``dequeue`` whose caller was killed must not take steps that nobody would receive. A
    slice that runs out changes nothing (the core refuses the call whole), so retrying is
    the same as one long wait.
    """
    try:
        bound = inspect.signature(method).bind(*args, **kwargs)
    except TypeError:  # the call itself raises it, with Python's own message
        return method(*args, **kwargs)
    if not bound.arguments.get("blocking", False):
        return method(*args, **kwargs)
    timeout = bound.arguments.get("timeout")
    seconds = check_timeout(timeout)  # None: for ever (None or inf); NaN, negative: refused
    deadline = None if seconds is None else time.monotonic() + seconds
    while True:
        left = SLICE if deadline is None else min(SLICE, max(0.0, deadline - time.monotonic()))
        bound.arguments["timeout"] = left
        try:
            return method(*bound.args, **bound.kwargs)
        except ReplayTimeout:
            if deadline is not None and time.monotonic() >= deadline:
                raise ReplayTimeout(f"{name}: not possible within timeout={timeout} s") from None
            if _caller_gone():
                raise ReplayClosed(f"{name}: the calling process went away") from None


def _accept(server: _Server, closed: threading.Event) -> None:
    """Accept connections until ``closed``; one daemon thread serves each."""
    listener = server.listener
    while not closed.is_set():
        try:
            conn = listener.accept()
        except OSError:  # a client that gave up during the accept
            time.sleep(0.01)
            continue
        if closed.is_set():
            conn.close()
            break
        server.conns.add(conn)
        threading.Thread(target=_serve, args=(server, conn), daemon=True).start()
    listener.close()
    _servers.discard(server)


def _serve(server: _Server, conn: Connection) -> None:
    try:
        server.handle_request(conn)  # closes conn at the end
    finally:
        server.conns.discard(conn)


def _shutdown(address: str, server: _Server, closed: threading.Event, pid: int) -> None:
    """Stop serving (the owner's buffer was collected); a no-op in a forked copy."""
    if os.getpid() != pid:
        return
    closed.set()
    server.stop_event.set()  # open connections end after their next request
    try:  # wake the accept
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(address)
    except OSError:
        pass


class Sharing:
    """The owner's side: starts the server on first need.

    Args:
        buffer: The owner's ALF buffer (held weakly).
    """

    def __init__(self, buffer: Any) -> None:
        self.pid = os.getpid()
        self._ref = weakref.ref(buffer)
        self._lock = threading.Lock()
        self.address: str | None = None
        _live.add(buffer)

    def start(self) -> str:
        """The server's address, starting the server the first time."""
        with self._lock:
            if self.address is not None:
                return self.address
            buffer = self._ref()
            if buffer is None:  # pragma: no cover - the caller holds the buffer
                raise ReplayClosed("allow_multiprocess: the ALF buffer was deleted")
            dispatcher = _Dispatcher(buffer)
            registry: dict[str, Any] = {TYPEID: (lambda: dispatcher, ("call",), None, None)}
            server = _Server(registry, None, bytes(current_process().authkey), "pickle")
            server.stop_event = threading.Event()
            server.conns = set()
            _servers.add(server)
            closed = threading.Event()
            address = str(server.address)
            name = f"rlreplay-alf-server-{os.path.basename(address)}"
            threading.Thread(target=_accept, args=(server, closed), name=name, daemon=True).start()
            finalizer = weakref.finalize(buffer, _shutdown, address, server, closed, self.pid)
            finalizer.atexit = False
            with _handles_lock:
                _handles[address] = buffer
            self.address = address
            return address


def _before_fork() -> None:
    for buffer in list(_live):
        with contextlib.suppress(Exception):  # if it fails, the child's copy says so
            buffer._sharing.start()


def _after_fork_in_child() -> None:
    global _handles_lock, _proxies_lock
    # A thread of the parent may have held these at the fork: the child gets fresh ones.
    _handles_lock, _proxies_lock = threading.Lock(), threading.Lock()
    _proxies.clear()
    # The child's copies of the servers' sockets would keep them open after the owner closes
    # them or dies (a client would then wait for ever instead of seeing the end): close them.
    for server in list(_servers):
        with contextlib.suppress(OSError):
            server.listener.close()  # the socket file stays: only the owner unlinks it
        for conn in list(server.conns):
            with contextlib.suppress(OSError):
                conn.close()
    _servers.clear()
    owners = list(_live)
    _live.clear()
    for buffer in owners:  # the child's copies become handles of the parent's buffers
        address = buffer._sharing.address
        make_remote(buffer, Remote(address, buffer._sharing.pid))


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


# ---------------------------------------------------------------------------------- client side
class _BufferProxy(BaseProxy):
    _exposed_ = ("call",)

    def call(self, kind: str, name: str, payload: bytes) -> Any:
        return self._callmethod("call", (kind, name, payload))


class _ClientManager(BaseManager):
    pass


_ClientManager.register(TYPEID, proxytype=_BufferProxy)
_proxies: dict[str, _BufferProxy] = {}  # address -> this process's proxy
_proxies_lock = threading.Lock()


class Remote:
    """A handle's way to its owner: the server's address (``None``: never started).

    Args:
        address: The owner's server address.
        owner_pid: The owner's process id (for messages).
    """

    def __init__(self, address: str | None, owner_pid: int) -> None:
        self.address = address
        self.owner_pid = owner_pid

    def _proxy(self, name: str) -> _BufferProxy:
        if self.address is None:
            raise ReplayClosed(
                f"{name}: this copy of an allow_multiprocess ALF buffer was made while its "
                f"owner (process {self.owner_pid}) could not start its server"
            )
        with _proxies_lock:
            proxy = _proxies.get(self.address)
            if proxy is None:
                manager = _ClientManager(self.address, bytes(current_process().authkey))
                manager.connect()
                proxy = getattr(manager, TYPEID)()
                _proxies[self.address] = proxy
            return proxy

    def call(self, kind: str, name: str, args: Any = (), kwargs: Any = None) -> Any:
        """Run ``name`` in the owner (``kind``: ``"call"`` a method, ``"get"`` a property).

        Raises:
            rlreplay.ReplayClosed: The owner has gone.
            rlreplay.ConfigError: ``core`` asked for, or this process cannot authenticate
                (not a descendant of the owner's process tree).
            Exception: Whatever the call raised in the owner.
        """
        if name in LOCAL:
            raise ConfigError(
                f"{name}: the storage lives in the owner process {self.owner_pid}; from another "
                "process use the ALF buffer's methods (they run in the owner)"
            )
        payload = pickle.dumps((args, kwargs or {}), pickle.HIGHEST_PROTOCOL)
        try:
            ok, data = self._proxy(name).call(kind, name, payload)
        except AuthenticationError as exc:
            raise ConfigError(
                f"{name}: expected this process to share the owner's multiprocessing authkey "
                f"(a fork or spawn descendant of process {self.owner_pid}), got {exc}"
            ) from None
        except (OSError, EOFError) as exc:
            with _proxies_lock:
                _proxies.pop(str(self.address), None)
            raise ReplayClosed(
                f"{name}: the ALF buffer's owner (process {self.owner_pid}, server "
                f"{self.address}) is gone: {type(exc).__name__}: {exc}"
            ) from None
        result = pickle.loads(data)
        if not ok:
            raise result
        return result


def _property_names(cls: type) -> list[str]:
    return [n for k in _own_classes(cls) for n, v in vars(k).items() if isinstance(v, property)]


def _own_classes(cls: type) -> list[type]:
    """``cls`` and its bases up to :class:`torch.nn.Module` (excluded)."""
    mro = cls.__mro__
    return list(mro[: mro.index(torch.nn.Module)])


def forwarded_methods(cls: type) -> list[str]:
    """The public methods of ``cls`` a handle forwards (its own and its mixins')."""
    names: list[str] = []
    for klass in _own_classes(cls):
        for name, value in vars(klass).items():
            if not name.startswith("_") and inspect.isfunction(value) and name not in names:
                names.append(name)
    return names


def make_remote(buffer: Any, remote: Remote) -> None:
    """Make ``buffer`` a handle: its public methods and properties run in the owner."""
    buffer.__dict__["_remote"] = remote
    buffer.__dict__["_sharing"] = None


def forward_public(cls: type) -> None:
    """Make the public methods and properties of ``cls`` (and its mixins') forward on handles.

    The wrappers are set on ``cls`` (so methods bound before a fork forward in the child too);
    on a buffer that is no handle, they cost two ``__dict__`` look-ups, and take the
    buffer's :data:`CALL_LOCK` if it has one (a buffer that is not thread-safe itself: the
    owner serves each other process from its own thread). A subclass's call forwards its
    own methods (the ones it inherits already forward).
    """
    for name in forwarded_methods(cls):
        method = getattr(cls, name)
        if not getattr(method, FORWARDS, False):
            setattr(cls, name, _forwarding_method(name, method))
    for name in _property_names(cls):
        prop = getattr(cls, name)
        if not getattr(prop.fget, FORWARDS, False):
            setattr(cls, name, _forwarding_property(name, prop.fget))


def _forwarding_method(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        remote: Remote | None = self.__dict__.get("_remote")
        if remote is None:
            lock = self.__dict__.get(CALL_LOCK)
            if lock is None:
                return method(self, *args, **kwargs)
            with lock:
                return method(self, *args, **kwargs)
        if name != "extra_repr":
            return remote.call("call", name, args, kwargs)
        try:  # repr() must not raise once the owner has gone
            return remote.call("call", name)
        except ReplayClosed:
            return f"handle of a gone buffer (owner process {remote.owner_pid})"

    setattr(forward, FORWARDS, True)
    return forward


def _forwarding_property(name: str, fget: Callable[[Any], Any]) -> property:
    @functools.wraps(fget)
    def get(self: Any) -> Any:
        remote: Remote | None = self.__dict__.get("_remote")
        if remote is not None:
            return remote.call("get", name)
        lock = self.__dict__.get(CALL_LOCK)
        if lock is None:
            return fget(self)
        with lock:
            return fget(self)

    setattr(get, FORWARDS, True)
    return property(get, doc=fget.__doc__)


# ---------------------------------------------------------------------------------- pickling
def reduce(buffer: Any) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """``__reduce_ex__`` of an ``allow_multiprocess`` buffer or handle: unpickles as a handle."""
    remote: Remote | None = buffer.__dict__.get("_remote")
    if remote is not None:
        return _rebuild, (type(buffer), remote.address, remote.owner_pid)
    sharing: Sharing = buffer._sharing
    return _rebuild, (type(buffer), sharing.start(), sharing.pid)


def _rebuild(cls: type[Any], address: str | None, owner_pid: int) -> Any:
    """This process's object for the buffer at ``address``: the owner, a copy or a handle."""
    with _handles_lock:
        known = _handles.get(address) if address is not None else None
        if known is not None:
            return known
        handle = object.__new__(cls)
        torch.nn.Module.__init__(handle)
        make_remote(handle, Remote(address, owner_pid))
        if address is not None:
            _handles[address] = handle
        return handle
