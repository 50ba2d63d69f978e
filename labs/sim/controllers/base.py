"""The loop every world controller shares: reconcile on API changes and on its own timer.

Controllers are level-triggered: `reconcile()` looks at the whole world and moves it one
step towards what it should be, then says when it next wants to run (a pending delay
expiring). A change to a watched type (or `wake()`) wakes it early; `stop()` wakes it for
good and joins its thread. With nothing pending it sleeps until woken, so an idle world uses
no CPU. It reads the watched types from their informers, not from the API server.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from labs.kube.informers import InformedKubeApi
from labs.kube.resources import KubeApiError, ResourceType
from labs.sim.timings import Timings

log = logging.getLogger(__name__)

# A full pass at least this often, for changes no watch reports (an out-of-band EC2 change).
RESYNC_SECONDS = 30.0
# After a reconcile that failed: look again soon, not at once.
RETRY_SECONDS = 1.0


class Controller:
    """Subclasses set `watched` and implement `reconcile() -> seconds until next pass | None`."""

    watched: tuple[ResourceType, ...] = ()

    def __init__(self, store: InformedKubeApi, timings: Timings) -> None:
        self.store = store
        self.timings = timings
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def name(self) -> str:
        return type(self).__name__

    def reconcile(self) -> float | None:
        raise NotImplementedError

    def start(self) -> None:
        """Follow the watched types' informers and start the loop in a daemon thread."""
        for rtype in self.watched:
            self.store.informer(rtype).subscribe(self._wake.set)
        self._spawn(f"{self.name}-loop", self._loop)

    def wake(self) -> None:
        """Run a pass now (something the controller reads changed outside the store)."""
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop following the informers, stop the loop and wait for its thread to end."""
        self._stopping.set()
        self._wake.set()
        for rtype in self.watched:
            self.store.informer(rtype).unsubscribe(self._wake.set)
        for thread in self._threads:
            thread.join(timeout)
        self._threads.clear()

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                delay = self.reconcile()
            except KubeApiError as error:  # an object changed under us: look again soon
                log.debug("%s: %s", self.name, error)
                delay = 0.05
            except Exception:  # keep the world alive; the log says what broke
                log.exception("%s reconcile failed", self.name)
                delay = RETRY_SECONDS
            wait = RESYNC_SECONDS if delay is None else min(max(delay, 0.0), RESYNC_SECONDS)
            self._wake.wait(wait)
