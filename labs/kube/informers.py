"""Watch-fed caches of the types the world's controllers follow, as client-go's informers are.

A controller reconciles on every change it watches and reads the whole world each time; read
from the API server, those reads were most of what the server did in a rehearsal. Here each
followed type has one watch; its objects are kept in memory and the controllers read them
from there, so the API server serves their writes and one watch per type. What a controller
writes is kept at once (as client-go's mutation cache does): a pass that creates a Node and
then writes its status reads back what it created, before the watch has reported it.

As with client-go's listers, what a read returns is the cache's own object, shared by every
reader: never change it (`update()` edits a copy).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from labs.kube.api import KubeApi, KubeWatch
from labs.kube.resources import NotFound, ResourceType, resolve

log = logging.getLogger(__name__)


class Informer:
    """One type's objects as its watch last reported them; listeners run after each change."""

    def __init__(
        self,
        api: KubeApi,
        rtype: ResourceType,
        namespace: str | None = None,
        field_selector: str = "",
    ) -> None:
        """List (synced before this returns), then follow the watch in a thread of its own:
        all namespaces or one, every object or those a field selector matches."""
        self.rtype = rtype
        self._lock = threading.Lock()
        self._objects: dict[tuple[str, str], tuple[int, dict]] = {}
        self._deleted: dict[tuple[str, str], int] = {}  # the version each object was deleted at
        self._listeners: list[Callable[[], None]] = []
        self._watch = KubeWatch(api, rtype, namespace, field_selector)
        for _ in range(self._watch.listed):  # the list the watch began with: synced before use
            self._apply(*self._watch.next())  # type: ignore[misc]
        self._thread = threading.Thread(
            target=self._run, name=f"informer-{rtype.plural}", daemon=True
        )
        self._thread.start()

    def subscribe(self, listener: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[], None]) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def get(self, namespace: str | None, name: str) -> dict | None:
        with self._lock:
            kept = self._objects.get((namespace or "", name))
        return None if kept is None else kept[1]

    def items(self, namespace: str | None) -> list[dict]:
        """Sorted by namespace and name, as the API server lists them."""
        with self._lock:
            found = [
                (key, obj) for key, (_, obj) in self._objects.items()
                if not namespace or key[0] == namespace
            ]  # fmt: skip
        found.sort(key=lambda item: item[0])
        return [obj for _, obj in found]

    def remember(self, obj: dict) -> None:
        """An object as a write of ours returned it (a copy: the writer keeps the original),
        unless the watch already has it newer."""
        self._keep(_key(obj), json.loads(json.dumps(obj)))

    def stop(self) -> None:
        self._watch.close()
        self._thread.join(5.0)

    def _run(self) -> None:
        for kind, obj in self._watch:
            self._apply(kind, obj)
            with self._lock:
                listeners = list(self._listeners)
            for listener in listeners:
                try:
                    listener()
                except Exception:  # one listener's bug must not end the watch for all
                    log.exception("informer %s: a listener failed", self.rtype.plural)

    def _apply(self, kind: str, obj: dict) -> None:
        if kind == KubeWatch.RELISTED:
            self._relisted(obj)
        elif kind == "DELETED":
            with self._lock:
                self._objects.pop(_key(obj), None)
                self._deleted[_key(obj)] = _version(obj)
        else:
            self._keep(_key(obj), obj)

    def _relisted(self, listing: dict) -> None:
        """The list replaces what the cache holds, except what changed after the list was read:
        a write of ours answered since (the watch reports it again) and a delete seen since."""
        read_at = _version(listing)
        fresh = {_key(o): (_version(o), o) for o in listing["items"]}
        with self._lock:
            deleted = {k: v for k, v in self._deleted.items() if v > read_at}
            for key, (version, kept) in self._objects.items():
                if version > max(read_at, fresh.get(key, (0, None))[0]):
                    fresh[key] = (version, kept)
            for key, version in deleted.items():
                if fresh.get(key, (0, None))[0] < version:
                    fresh.pop(key, None)
            self._objects, self._deleted = fresh, deleted

    def _keep(self, key: tuple[str, str], obj: dict) -> None:
        """Newer versions win: a write of ours may come back before or after its watch event,
        and must not bring back an object the watch has seen deleted since."""
        version = _version(obj)
        with self._lock:
            kept = self._objects.get(key)
            if version > max(kept[0] if kept else 0, self._deleted.get(key, 0)):
                self._objects[key] = (version, obj)


class InformedKubeApi(KubeApi):
    """The world's API client: reads of a followed type come from its informer; everything
    else, and every write, goes to the API server. An update that meets a Conflict re-reads
    from the server, as the informer may not have caught up with the last write yet."""

    def __init__(self, api: KubeApi) -> None:
        super().__init__(api.client)
        self._plain = api
        self._informers: dict[ResourceType, Informer] = {}

    @property
    def plain(self) -> KubeApi:
        """The API server itself, past the caches: for a read that must be current."""
        return self._plain

    def informer(self, ref: ResourceType | str) -> Informer:
        """The type's informer, started on first use (its list and watch)."""
        rtype = resolve(ref)
        known = self._informers.get(rtype)
        if known is None:
            known = self._informers.setdefault(rtype, Informer(self._plain, rtype))
        return known

    def stop(self) -> None:
        """End every informer's watch."""
        for informer in self._informers.values():
            informer.stop()
        self._informers.clear()

    def get(self, ref: ResourceType | str, name: str, namespace: str | None = None) -> dict:
        rtype = resolve(ref)
        informer = self._informers.get(rtype)
        if informer is None:
            return super().get(rtype, name, namespace)
        found = informer.get(namespace if rtype.namespaced else None, name)
        if found is None:
            raise NotFound(f'{rtype.plural} "{name}" not found')
        return found

    def list(
        self,
        ref: ResourceType | str,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> tuple[list[dict], str]:
        rtype = resolve(ref)
        informer = self._informers.get(rtype)
        wanted = _matcher(label_selector, field_selector)
        if informer is None or wanted is None:
            return super().list(rtype, namespace, label_selector, field_selector)
        return [o for o in informer.items(namespace) if wanted(o)], ""

    def create(self, ref: ResourceType | str, obj: dict, namespace: str | None = None) -> dict:
        return self._remembered(ref, super().create(ref, obj, namespace))

    def replace(self, ref: ResourceType | str, obj: dict, subresource: str | None = None) -> dict:
        return self._remembered(ref, super().replace(ref, obj, subresource))

    def patch(
        self,
        ref: ResourceType | str,
        name: str,
        patch: Any,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict:
        return self._remembered(ref, super().patch(ref, name, patch, namespace, subresource))

    def _remembered(self, ref: ResourceType | str, written: dict) -> dict:
        informer = self._informers.get(resolve(ref))
        if informer is not None:
            informer.remember(written)
        return written

    def _current(self, rtype: ResourceType, name: str, namespace: str | None, fresh: bool) -> dict:
        return super().get(rtype, name, namespace) if fresh else self.get(rtype, name, namespace)


def _version(obj: dict) -> int:
    """etcd's revision, which the API server's resourceVersion is (0 if it is not a number)."""
    version = obj["metadata"].get("resourceVersion", "")
    return int(version) if version.isdigit() else 0


def _key(obj: dict) -> tuple[str, str]:
    metadata = obj["metadata"]
    return metadata.get("namespace", ""), metadata["name"]


def _matcher(labels: str, fields: str) -> Callable[[dict], bool] | None:
    """A test for equality-based selectors (`k=v`, `k==v`, `k!=v`, `k`, `!k` on labels;
    `path=v`, `path!=v` on fields); None for a selector form left to the server."""
    terms: list[Callable[[dict], bool]] = []
    for text, values in ((labels, _labels), (fields, _fields)):
        for term in filter(None, (t.strip() for t in text.split(","))):
            test = _term(term, values, allow_exists=values is _labels)
            if test is None:
                return None
            terms.append(test)
    return lambda obj: all(test(obj) for test in terms)


def _term(
    term: str, values: Callable[[dict], dict[str, str]], allow_exists: bool
) -> Callable[[dict], bool] | None:
    if any(mark in term for mark in ("(", " in ", " notin ")):
        return None
    for operator, equal in (("!=", False), ("==", True), ("=", True)):
        if operator in term:
            key, value = (part.strip() for part in term.split(operator, 1))
            return lambda obj: (values(obj).get(key) == value) == equal
    if not allow_exists:
        return None
    if term.startswith("!"):
        return lambda obj: term[1:] not in values(obj)
    return lambda obj: term in values(obj)


def _labels(obj: dict) -> dict[str, str]:
    return obj["metadata"].get("labels") or {}


def _fields(obj: dict) -> dict[str, str]:
    """The object read as field paths: only the few a field selector may name."""
    flat: dict[str, str] = {}
    for path in ("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"):
        value: object = obj
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        flat[path] = "" if value is None else str(value)
    return flat
