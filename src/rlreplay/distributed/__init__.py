"""Replay for many processes and machines on Ray (``pip install 'rlreplay[ray]'``).

:class:`ReplayService` shards a replay memory over Ray actors, each holding a core buffer;
:class:`Writer` objects (from :meth:`ReplayService.writer`) feed it from any process, and
:meth:`ReplayService.sample` draws from all shards with exactly one buffer's law. Ray is
imported when a service is built, never by ``import rlreplay``. See ``docs/distributed.md``.
"""

from rlreplay.distributed.service import ReplayService
from rlreplay.distributed.writer import Writer

__all__ = ["ReplayService", "Writer"]
