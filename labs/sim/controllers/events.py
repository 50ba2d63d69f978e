"""Kubernetes Events recorded the way the kubelet records them.

The same (object, reason, message) seen again bumps `count` and `lastTimestamp` on the
existing Event instead of adding one, which is what `kubectl describe` turns into
`FailedScheduling (x3 over 9m40s)`.

Events are named as client-go names them, `<object>.<unix nanoseconds in hex>`, so a list
(sorted by name) shows one object's story in the order it happened even when several
Events share a second; `kubectl describe` keeps that order for equal timestamps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from labs.kube.api import KubeApi
from labs.kube.resources import EVENTS, NotFound, now_rfc3339

_name_lock = threading.Lock()
_last_stamp = 0


def event_name(involved_name: str) -> str:
    """`<name>.<ns since the epoch, hex>`, strictly increasing across all recorders."""
    global _last_stamp
    with _name_lock:
        _last_stamp = max(time.time_ns(), _last_stamp + 1)
        return f"{involved_name}.{_last_stamp:x}"


class EventRecorder:
    """Records Events for one component (`kubelet`, the device plugin, ...)."""

    def __init__(self, store: KubeApi, component: str) -> None:
        self._store = store
        self._component = component
        self._known: dict[tuple[str, str, str], tuple[str, str]] = {}
        self._lock = threading.Lock()

    def record(
        self,
        involved: dict,
        reason: str,
        message: str,
        event_type: str = "Normal",
        host: str | None = None,
        series: str | None = None,
    ) -> dict:
        """Create the Event, or bump the one already recorded for the same story.

        `involved` is the object, or a reference without a uid (as the taint manager names
        a pod it deletes); the Event's involvedObject then has no uid either. `series` names
        a story whose message changes each time (client-go's combined Event): the Event of
        the same series is bumped and takes the new message.
        """
        meta = involved["metadata"]
        namespace = meta.get("namespace") or "default"
        key = (meta.get("uid", ""), reason, message if series is None else f"series:{series}")
        with self._lock:
            known = self._known.get(key)
        if known is not None:
            try:
                return self._store.update(
                    EVENTS, known[1], _bump(None if series is None else message), known[0]
                )
            except NotFound:
                with self._lock:
                    self._known.pop(key, None)
        stamp = now_rfc3339()
        source = {"component": self._component} | ({"host": host} if host else {})
        event = {
            "metadata": {"name": event_name(meta["name"])},
            "involvedObject": {
                "kind": involved.get("kind", ""),
                "apiVersion": involved.get("apiVersion", ""),
                "namespace": meta.get("namespace", ""),
                "name": meta["name"],
                **({"uid": meta["uid"]} if meta.get("uid") else {}),
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message,
            "type": event_type,
            "source": source,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "reportingComponent": self._component,
            "reportingInstance": host or "",
        }
        created = self._store.create(EVENTS, event, namespace=namespace)
        with self._lock:
            self._known[key] = (namespace, created["metadata"]["name"])
        return created


def _bump(message: str | None) -> Callable[[dict], None]:
    """One more of the same Event (with its new message, for a series)."""

    def apply(event: dict) -> None:
        event["count"] = event.get("count", 1) + 1
        event["lastTimestamp"] = now_rfc3339()
        if message is not None:
            event["message"] = message

    return apply
