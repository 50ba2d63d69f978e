"""Thread-safe in-memory object store with Kubernetes semantics, shared by the API emulator and
the sim's world controllers.

Why its own store: the HTTP layer and the controllers must agree on one resourceVersion
counter, one watch history and one set of error messages, so both sit on this module.

Semantics worth knowing:
- Stored objects are never mutated in place; every write stores a new dict, so reads,
  history and watches can share snapshots and callers always get deep copies.
- `resourceVersion` is one increasing counter across the whole store; `generation` starts at 1
  and is bumped when anything outside `metadata` and `status` changes.
- Types with a "status" subresource ignore status changes on the main resource
  (`replace`/`patch`), and the status subresource changes only `status`. `update()` is the
  controllers' read-modify-write and may change anything except name, namespace and uid.
- A no-op write (result equal to the stored object) bumps nothing and emits no event.
- `watch(resource_version=None | "" | "0")` first replays the current objects as ADDED (the
  Kubernetes "start at most recent" semantics); a numeric version replays history after it,
  or raises `Gone` (410) once that history has been dropped.
- Admission is the part a client notices: creating into a namespace that does not exist is
  NotFound, resource quantities that do not parse are Invalid (API writes only; the
  controllers' `update()` is trusted), and a new pod passes EKS's admission plugins
  (`labs.sim.api_admission`: tolerations for extended resources, 403 Forbidden for a
  RuntimeClass that does not exist). Deleting a namespace removes it and everything in it
  at once. The namespaces default, kube-system, kube-public and kube-node-lease exist from
  the start.
- `delete()` honours DeleteOptions preconditions (uid, resourceVersion): Conflict on mismatch.
- Custom resources are not built in: register them (for the GPU Operator,
  `store.register(CLUSTER_POLICY)`) when the operator's CRD would be installed, so a
  cluster without the operator answers "the server doesn't have a resource type".
"""

from __future__ import annotations

import json
import queue
import re
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from labs.sim.api_admission import admit
from labs.sim.api_defaults import ON_CREATE, as_served, invalid_quantities
from labs.sim.api_patch import PatchError, apply_patch
from labs.sim.api_selectors import Matcher, SelectorError, field_matcher, label_matcher
from labs.sim.resources import (  # noqa: F401  (re-exported while the emulator remains)
    BUILTIN_TYPES,
    CLUSTER_POLICY,
    CONFIGMAPS,
    DAEMONSETS,
    DEPLOYMENTS,
    EVENTS,
    JOBS,
    NAMESPACES,
    NODES,
    OBJECT_VERBS,
    PODS,
    REPLICASETS,
    RUNTIMECLASSES,
    SECRETS,
    SERVICEACCOUNTS,
    SERVICES,
    AlreadyExists,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    MethodNotAllowed,
    NotFound,
    ResourceType,
    StoreError,
    clone,
    now_rfc3339,
)

_INITIAL_STATUS = {NAMESPACES: {"phase": "Active"}, PODS: {"phase": "Pending"}}
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def _content(obj: dict) -> dict:
    """What `generation` tracks: everything but metadata and status."""
    return {key: value for key, value in obj.items() if key not in ("metadata", "status")}


@dataclass(frozen=True)
class _Event:
    resource_version: int
    ref: str
    type: str
    obj: dict
    old: dict | None


_CLOSED = object()


class Watch:
    """A stream of ("ADDED" | "MODIFIED" | "DELETED", object) for one resource type.

    Objects moving into or out of the selectors arrive as ADDED or DELETED, as on a real
    API server. Close it when done (or use it as a context manager).
    """

    def __init__(
        self, store: ObjectStore, ref: str, namespace: str | None, matchers: list[Matcher]
    ) -> None:
        self._store = store
        self._ref = ref
        self._namespace = namespace
        self._matchers = matchers
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = threading.Event()

    def _matches(self, obj: dict | None) -> bool:
        if obj is None:
            return False
        if self._namespace and obj["metadata"].get("namespace") != self._namespace:
            return False
        return all(matcher(obj) for matcher in self._matchers)

    def _offer(self, event: _Event) -> None:
        if event.ref != self._ref:
            return
        now_matches = self._matches(event.obj)
        before_matched = self._matches(event.old)
        if event.type == "MODIFIED":
            if now_matches:
                self._queue.put(("MODIFIED" if before_matched else "ADDED", event.obj))
            elif before_matched:
                self._queue.put(("DELETED", event.obj))
        elif now_matches:
            self._queue.put((event.type, event.obj))

    def next(self, timeout: float | None = None) -> tuple[str, dict] | None:
        """The next event, or None on timeout or once the watch is closed."""
        if self._closed.is_set():
            return None
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is _CLOSED:
            return None
        event_type, obj = item
        return event_type, clone(obj)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def close(self) -> None:
        """Stop the stream; a `next()` blocked in another thread returns None."""
        if not self._closed.is_set():
            self._closed.set()
            self._store._unwatch(self)
            self._queue.put(_CLOSED)

    def __iter__(self) -> Iterator[tuple[str, dict]]:
        while (event := self.next()) is not None:
            yield event

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class ObjectStore:
    """Kubernetes objects by type, namespace and name, with watches and pod logs."""

    def __init__(self, history_limit: int = 10_000) -> None:
        self._lock = threading.RLock()
        self._log_changed = threading.Condition(self._lock)
        self._types: dict[str, ResourceType] = {}
        self._aliases: dict[str, str] = {}
        self._objects: dict[str, dict[tuple[str, str], dict]] = {}
        self._resource_version = 0
        self._history: deque[_Event] = deque(maxlen=history_limit)
        self._history_floor = 0
        self._watches: set[Watch] = set()
        self._logs: dict[tuple[str, str], str] = {}
        for rtype in BUILTIN_TYPES:
            self.register(rtype)
        for name in INITIAL_NAMESPACES:
            self.create(NAMESPACES, {"metadata": {"name": name}})

    # ---- types -----------------------------------------------------------------------

    def register(self, rtype: ResourceType) -> None:
        """Serve a resource type (idempotent); a different type under the same name is an error."""
        with self._lock:
            existing = self._types.get(rtype.ref)
            if existing is not None and existing != rtype:
                raise ValueError(f"resource {rtype.ref} is already registered as {existing}")
            self._types[rtype.ref] = rtype
            self._objects.setdefault(rtype.ref, {})
            names = {rtype.ref, rtype.plural, rtype.singular, *rtype.short_names}
            names |= {f"{rtype.plural}.{rtype.version}.{rtype.group}".rstrip(".")}
            for name in names:
                self._aliases.setdefault(name, rtype.ref)

    def resource_types(self) -> list[ResourceType]:
        with self._lock:
            return list(self._types.values())

    def resolve(self, ref: str | ResourceType) -> ResourceType:
        """The registered type for a ResourceType or a name kubectl would accept."""
        with self._lock:
            if isinstance(ref, ResourceType):
                if self._types.get(ref.ref) == ref:
                    return ref
                ref = ref.ref
            target = self._aliases.get(ref) or self._aliases.get(ref.lower())
            if target is None:
                raise NotFound(f'the server doesn\'t have a resource type "{ref}"')
            return self._types[target]

    # ---- reads -----------------------------------------------------------------------

    def get(self, ref: str | ResourceType, name: str, namespace: str | None = None) -> dict:
        with self._lock:
            rtype = self.resolve(ref)
            return clone(self._current(rtype, self._scope(rtype, namespace), name))

    def list(
        self,
        ref: str | ResourceType,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> tuple[list[dict], str]:
        """Matching objects sorted by namespace and name, and the store's resourceVersion."""
        with self._lock:
            rtype = self.resolve(ref)
            matchers = _matchers(rtype, label_selector, field_selector)
            found = [
                obj
                for (obj_namespace, _), obj in sorted(self._objects[rtype.ref].items())
                if (not namespace or obj_namespace == namespace)
                and all(matcher(obj) for matcher in matchers)
            ]
            return clone(found), str(self._resource_version)

    @property
    def resource_version(self) -> str:
        with self._lock:
            return str(self._resource_version)

    # ---- writes ----------------------------------------------------------------------

    def create(self, ref: str | ResourceType, obj: dict, namespace: str | None = None) -> dict:
        """Store a new object, filling the server-owned fields; AlreadyExists if taken."""
        with self._lock:
            rtype = self.resolve(ref)
            obj = _with_type_fields(rtype, obj)
            metadata = obj["metadata"]
            scope = self._scope(rtype, namespace, metadata.get("namespace"))
            # Admission runs before a name is generated: its messages name the prefix.
            asked = metadata.get("name") or metadata.get("generateName") or ""
            name = metadata.get("name") or self._generated_name(rtype, scope, metadata)
            _validate_name(rtype, name)
            if rtype.namespaced and ("", scope) not in self._objects[NAMESPACES.ref]:
                raise NotFound(f'namespaces "{scope}" not found')
            if (scope, name) in self._objects[rtype.ref]:
                raise AlreadyExists(f'{rtype.ref} "{name}" already exists')
            metadata["name"] = name
            if rtype.namespaced:
                metadata["namespace"] = scope
            else:
                metadata.pop("namespace", None)
            metadata.pop("deletionTimestamp", None)
            metadata["uid"] = str(uuid.uuid4())
            metadata["creationTimestamp"] = now_rfc3339()
            metadata["generation"] = 1
            if rtype.kind in ON_CREATE and rtype in BUILTIN_TYPES:
                ON_CREATE[rtype.kind](obj)
            _validate_quantities(rtype, obj)
            self._admit(rtype, obj, asked)
            if rtype in _INITIAL_STATUS and not obj.get("status"):
                obj["status"] = clone(_INITIAL_STATUS[rtype])
            return clone(self._commit(rtype, (scope, name), "ADDED", obj, None))

    def replace(
        self,
        ref: str | ResourceType,
        obj: dict,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict:
        """PUT semantics: Conflict when metadata.resourceVersion is set and stale."""
        with self._lock:
            rtype = self.resolve(ref)
            _check_subresource(rtype, subresource)
            proposed = _with_type_fields(rtype, obj)
            name = proposed["metadata"].get("name")
            if not name:
                raise BadRequest(f"{rtype.kind} has no metadata.name: name the object to replace")
            scope = self._scope(rtype, namespace, proposed["metadata"].get("namespace"))
            current = self._current(rtype, scope, name)
            return clone(self._write(rtype, current, proposed, subresource))

    def patch(
        self,
        ref: str | ResourceType,
        name: str,
        patch: Any,
        patch_type: str,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict:
        """Apply a "merge", "strategic" or "json" patch to the stored object."""
        with self._lock:
            rtype = self.resolve(ref)
            _check_subresource(rtype, subresource)
            current = self._current(rtype, self._scope(rtype, namespace), name)
            try:
                proposed = apply_patch(current, patch, patch_type)
            except PatchError as error:
                kind = BadRequest if error.invalid_input else Invalid
                raise kind(str(error)) from error
            if not isinstance(proposed, dict):
                raise Invalid(f'the patch turned {rtype.ref} "{name}" into a non-object')
            proposed = _with_type_fields(rtype, proposed)
            if proposed["metadata"].get("name") != name:
                raise BadRequest(f'the patch may not change the name of {rtype.ref} "{name}"')
            return clone(self._write(rtype, current, proposed, subresource))

    def update(
        self,
        ref: str | ResourceType,
        name: str,
        mutate: Callable[[dict], None],
        namespace: str | None = None,
    ) -> dict:
        """Atomic read-modify-write for controllers; `mutate` edits a copy in place, quickly.

        It runs under the store lock, so it must not block or wait on other threads.
        """
        with self._lock:
            rtype = self.resolve(ref)
            scope = self._scope(rtype, namespace)
            current = self._current(rtype, scope, name)
            working = clone(current)
            mutate(working)
            as_served(rtype.kind, working)
            metadata = working.get("metadata") or {}
            for field in ("name", "namespace", "uid"):
                if metadata.get(field) != current["metadata"].get(field):
                    raise Invalid(
                        f'{rtype.qualified_kind} "{name}" is invalid: '
                        f"metadata.{field}: field is immutable"
                    )
            metadata["resourceVersion"] = current["metadata"]["resourceVersion"]
            return clone(self._store_if_changed(rtype, current, working))

    def delete(
        self,
        ref: str | ResourceType,
        name: str,
        namespace: str | None = None,
        preconditions: dict | None = None,
    ) -> dict:
        """Remove at once and emit DELETED; deleting a namespace deletes its contents.

        `preconditions` ({"uid": ..., "resourceVersion": ...}, from DeleteOptions) must match
        the stored object, or nothing is deleted and Conflict says which one differs.
        """
        with self._lock:
            rtype = self.resolve(ref)
            scope = self._scope(rtype, namespace)
            current = self._current(rtype, scope, name)
            _check_preconditions(current, preconditions or {})
            if rtype == NAMESPACES:
                for contained in self.resource_types():
                    for key in [key for key in self._objects[contained.ref] if key[0] == name]:
                        self._remove(contained, key)
            return clone(self._remove(rtype, (scope, current["metadata"]["name"])))

    # ---- watches ---------------------------------------------------------------------

    def watch(
        self,
        ref: str | ResourceType,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> Watch:
        """Events for one type after `resource_version` (see the module docstring)."""
        with self._lock:
            rtype = self.resolve(ref)
            matchers = _matchers(rtype, label_selector, field_selector)
            stream = Watch(self, rtype.ref, namespace or None, matchers)
            if resource_version in (None, "", "0"):
                for _, obj in sorted(self._objects[rtype.ref].items()):
                    stream._offer(_Event(0, rtype.ref, "ADDED", obj, None))
            else:
                since = _parse_resource_version(resource_version)
                if since < self._history_floor:
                    raise Gone(f"too old resource version: {since} ({self._resource_version})")
                for event in self._history:
                    if event.resource_version > since:
                        stream._offer(event)
            self._watches.add(stream)
            return stream

    def _unwatch(self, stream: Watch) -> None:
        with self._lock:
            self._watches.discard(stream)

    # ---- pod logs --------------------------------------------------------------------

    def set_pod_log(self, namespace: str, name: str, text: str) -> None:
        with self._lock:
            self._logs[(namespace, name)] = text
            self._log_changed.notify_all()

    def append_pod_log(self, namespace: str, name: str, text: str) -> None:
        """Append `text` as is (include the trailing newline of each line)."""
        with self._lock:
            self._logs[(namespace, name)] = self._logs.get((namespace, name), "") + text
            self._log_changed.notify_all()

    def pod_log(self, namespace: str, name: str) -> str:
        """The pod's log so far; NotFound when the pod does not exist."""
        with self._lock:
            self._current(PODS, namespace, name)
            return self._logs.get((namespace, name), "")

    def wait_pod_log(self, namespace: str, name: str, offset: int, timeout: float) -> str:
        """Log text after `offset` once there is some (or "" after `timeout`), for follow."""
        with self._lock:
            self._log_changed.wait_for(
                lambda: (
                    len(self._logs.get((namespace, name), "")) > offset
                    or (namespace, name) not in self._objects[PODS.ref]
                ),
                timeout,
            )
            return self._logs.get((namespace, name), "")[offset:]

    # ---- internals -------------------------------------------------------------------

    def _scope(
        self, rtype: ResourceType, namespace: str | None, object_namespace: str | None = None
    ) -> str:
        if not rtype.namespaced:
            return ""
        if namespace and object_namespace and namespace != object_namespace:
            raise BadRequest(
                "the namespace of the provided object does not match the namespace sent on "
                f"the request ({object_namespace!r} vs {namespace!r})"
            )
        return namespace or object_namespace or "default"

    def _current(self, rtype: ResourceType, scope: str, name: str) -> dict:
        obj = self._objects[rtype.ref].get((scope, name))
        if obj is None:
            raise NotFound(f'{rtype.ref} "{name}" not found')
        return obj

    def _admit(self, rtype: ResourceType, obj: dict, asked: str) -> None:
        """The admission plugins of a new built-in object (`labs.sim.api_admission`); a
        refusal names the object as it was asked for: its name, else its generateName (as
        `admission.NewForbidden` does, name generation not having happened yet)."""
        if rtype not in BUILTIN_TYPES:
            return

        def exists(plural: str, name: str) -> bool:
            return ("", name) in self._objects[self.resolve(plural).ref]

        rejection = admit(rtype.kind, obj, exists)
        if rejection:
            raise Forbidden(f'{rtype.ref} "{asked}" is forbidden: {rejection}')

    def _generated_name(self, rtype: ResourceType, scope: str, metadata: dict) -> str:
        prefix = metadata.get("generateName")
        if not prefix:
            raise Invalid(
                f'{rtype.qualified_kind} "" is invalid: metadata.name: Required value: '
                "name or generateName is required"
            )
        while True:
            suffix = uuid.uuid4().int
            name = prefix + "".join(
                _NAME_SUFFIX_ALPHABET[(suffix >> (5 * i)) % len(_NAME_SUFFIX_ALPHABET)]
                for i in range(5)
            )
            if (scope, name) not in self._objects[rtype.ref]:
                return name

    def _write(
        self, rtype: ResourceType, current: dict, proposed: dict, subresource: str | None
    ) -> dict:
        """Shared by replace and patch: preconditions, subresource rules, server fields."""
        check_resource_version(rtype, current, proposed["metadata"].get("resourceVersion"))
        current_version = current["metadata"]["resourceVersion"]
        if subresource == "status":
            new = clone(current)
            new.pop("status", None)
            if "status" in proposed:
                new["status"] = proposed["status"]
        else:
            new = proposed
            metadata = new["metadata"]
            for field in ("name", "namespace", "uid", "creationTimestamp", "generation"):
                if field in current["metadata"]:
                    metadata[field] = current["metadata"][field]
            metadata["resourceVersion"] = current_version
            if "status" in rtype.subresources:
                new.pop("status", None)
                if "status" in current:
                    new["status"] = current["status"]
        _validate_quantities(rtype, new)
        return self._store_if_changed(rtype, current, new)

    def _store_if_changed(self, rtype: ResourceType, current: dict, new: dict) -> dict:
        if _content(new) != _content(current):
            new["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
        if new == current:
            return current
        key = (current["metadata"].get("namespace", ""), current["metadata"]["name"])
        return self._commit(rtype, key, "MODIFIED", new, current)

    def _remove(self, rtype: ResourceType, key: tuple[str, str]) -> dict:
        removed = clone(self._objects[rtype.ref][key])
        if rtype == PODS:
            self._logs.pop(key, None)
            self._log_changed.notify_all()
        return self._commit(rtype, key, "DELETED", removed, None)

    def _commit(
        self,
        rtype: ResourceType,
        key: tuple[str, str],
        event_type: str,
        obj: dict,
        old: dict | None,
    ) -> dict:
        self._resource_version += 1
        obj["metadata"]["resourceVersion"] = str(self._resource_version)
        if event_type == "DELETED":
            del self._objects[rtype.ref][key]
        else:
            self._objects[rtype.ref][key] = obj
        if len(self._history) == self._history.maxlen:
            self._history_floor = self._history[0].resource_version
        event = _Event(self._resource_version, rtype.ref, event_type, obj, old)
        self._history.append(event)
        for stream in list(self._watches):
            stream._offer(event)
        return obj


def check_resource_version(rtype: ResourceType, current: dict, wanted: str | None) -> None:
    """Conflict when a writer names a resourceVersion other than the stored one."""
    if wanted and wanted != current["metadata"]["resourceVersion"]:
        raise Conflict(
            f'Operation cannot be fulfilled on {rtype.ref} "{current["metadata"]["name"]}": '
            "the object has been modified; please apply your changes to the latest version "
            "and try again"
        )


def _check_preconditions(current: dict, preconditions: dict) -> None:
    for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
        wanted = preconditions.get(field)
        actual = current["metadata"].get(field)
        if wanted is not None and wanted != actual:
            raise Conflict(
                f"Precondition failed: {label} in precondition: {wanted}, "
                f"{label} in object meta: {actual}"
            )


def _validate_quantities(rtype: ResourceType, obj: dict) -> None:
    """Invalid, naming every field, when a built-in object carries an unparseable quantity."""
    if rtype not in BUILTIN_TYPES:
        return
    problems = invalid_quantities(obj)
    if not problems:
        return
    causes = [
        {
            "reason": "FieldValueInvalid",
            "message": f"Invalid value: {json.dumps(value)}: {why}",
            "field": path,
        }
        for path, value, why in problems
    ]
    details = [f"{c['field']}: {c['message']}" for c in causes]
    joined = details[0] if len(details) == 1 else f"[{', '.join(details)}]"
    name = obj["metadata"].get("name", "")
    raise Invalid(f'{rtype.qualified_kind} "{name}" is invalid: {joined}', causes)


def _matchers(rtype: ResourceType, label_selector: str, field_selector: str) -> list[Matcher]:
    try:
        return [label_matcher(label_selector), field_matcher(field_selector, rtype.kind)]
    except SelectorError as error:
        raise BadRequest(str(error)) from error


def _parse_resource_version(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise BadRequest(
            f"invalid resourceVersion {value!r}: use a value from a list or an object"
        ) from None


def _check_subresource(rtype: ResourceType, subresource: str | None) -> None:
    if subresource is not None and (
        subresource != "status" or subresource not in rtype.subresources
    ):
        raise NotFound(f"{rtype.ref} has no writable subresource {subresource!r}")


def _with_type_fields(rtype: ResourceType, obj: dict) -> dict:
    """A deep copy with apiVersion and kind first, checking any the caller gave."""
    if not isinstance(obj, dict):
        raise BadRequest(f"a {rtype.kind} must be a JSON object, got {type(obj).__name__}")
    for field, expected in (("apiVersion", rtype.api_version), ("kind", rtype.kind)):
        given = obj.get(field)
        if given and given != expected:
            raise BadRequest(
                f"{field} {given!r} does not match the resource {rtype.ref} (expected {expected!r})"
            )
    metadata = obj.get("metadata", {})
    if not isinstance(metadata, dict):
        raise BadRequest(f"metadata of a {rtype.kind} must be a JSON object")
    rest = {key: clone(value) for key, value in obj.items() if key not in ("apiVersion", "kind")}
    rest["metadata"] = clone(metadata)
    return as_served(rtype.kind, {"apiVersion": rtype.api_version, "kind": rtype.kind, **rest})


def _validate_name(rtype: ResourceType, name: str) -> None:
    if not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        raise Invalid(
            f'{rtype.qualified_kind} "{name}" is invalid: metadata.name: Invalid value: "{name}": '
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
            "'-' or '.', and must start and end with an alphanumeric character"
        )
