"""A Kubernetes API emulator on loopback: a generic REST layer over `ObjectStore`.

Why stdlib `ThreadingHTTPServer` and not aiohttp: the store is synchronous and watches block
on queues, so one thread per connection is the simplest correct model, needs no event-loop
bridging and no extra dependency. HTTP/1.1 (chunked watch streams) and TCP_NODELAY (no 40 ms
Nagle stalls per response) make it fast enough for kubectl and the official client. It
speaks HTTPS only (its own CA, `labs.sim.tls`): clients send a token over TLS only.

What it serves: legacy discovery, OpenAPI v3 (`labs.sim.openapi`), get/list/create/
replace/patch/delete with selectors and delete preconditions, the status subresource, the
deployments' scale subresource, watches, pods/log and Table output; protobuf request bodies
(`api_protobuf`), authorization reviews (`api_reviews`), pods/exec and pods/attach
(`api_stream`, run by the world's `runtime`), and the world's own `controls` (its pace).
Every error is a full `Status` body. Authentication as on a real cluster: every request but
the public `/version` and health checks needs `Authorization: Bearer <token>` (the server's
random token, or what `also_accept` takes, e.g. an EKS token), else 401 Unauthorized; there
is no authorization beyond that (reviews allow everything). It deliberately has no admission
beyond the store's (namespace exists, quantities parse, EKS's pod plugins), no aggregated
discovery, no server-side apply, no dry run, no field validation, no finalizers or graceful
deletion, and no pagination.
"""

from __future__ import annotations

import hmac
import json
import logging
import select
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from labs.sim import (
    api_discovery,
    api_protobuf,
    api_reviews,
    api_scale,
    api_stream,
    api_tables,
    openapi,
)
from labs.sim.auth import new_token
from labs.sim.kubeconfig import kubeconfig_document, write_kubeconfig
from labs.sim.store import (
    BUILTIN_TYPES,
    PODS,
    BadRequest,
    Gone,
    MethodNotAllowed,
    NotFound,
    ObjectStore,
    ResourceType,
    StoreError,
    Watch,
)
from labs.sim.tls import ServerTls, new_server_tls

log = logging.getLogger(__name__)

DEFAULT_WATCH_SECONDS = 1800
REQUEST_LOG_SIZE = 10_000  # the latest requests kept in `request_log`
POLL_SECONDS = 0.25
STOP_GRACE_SECONDS = 5
# What a real API server shows anyone (system:public-info-viewer).
PUBLIC_PATHS = frozenset({"/version", "/healthz", "/livez", "/readyz"})
PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/json-patch+json": "json",
}


class UnsupportedMediaType(StoreError):
    code, reason = 415, "UnsupportedMediaType"


class Unauthorized(StoreError):
    code, reason = 401, "Unauthorized"


def _unknown_path() -> NotFound:
    return NotFound("the server could not find the requested resource")


def status_body(error: StoreError, details: dict | None = None) -> dict:
    """The `Status` object a real API server sends with every error."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": error.message,
        "reason": error.reason,
        "code": error.code,
    }
    if error.causes:
        details = {**(details or {}), "causes": error.causes}
    if details:
        body["details"] = details
    return body


@dataclass(frozen=True)
class _Target:
    """What a resource URL names."""

    rtype: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None

    @property
    def details(self) -> dict:
        details = {"group": self.rtype.group, "kind": self.rtype.plural}
        return {"name": self.name, **details} if self.name else details

    @property
    def object_name(self) -> str:
        """The name, for verbs on one object: the router sends only named URLs to those."""
        if self.name is None:
            raise RuntimeError(f"no object name on the URL for {self.rtype.plural}")
        return self.name


class ApiServer:
    """The emulator: `start()` returns its URL; `stop()` also ends open watch streams."""

    def __init__(
        self,
        store: ObjectStore | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        also_accept: Callable[[str], bool] | None = None,
        tls: ServerTls | None = None,
    ) -> None:
        self.store = store if store is not None else ObjectStore()
        for review in api_reviews.REVIEW_TYPES:
            self.store.register(review)
        self.runtime: api_stream.StreamRuntime | None = None  # the kubelets, for exec/attach
        # Paths outside the Kubernetes API the world answers (its pace): path -> handler.
        self.controls: dict[str, Callable[[str, Any], dict]] = {}
        self.token = token or new_token()
        self.tls = tls or new_server_tls(host)
        self._also_accept = also_accept or (lambda _token: False)
        self._address = (host, port)
        self._httpd: _HttpServer | None = None
        self._thread: threading.Thread | None = None
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._watches: set[Watch] = set()
        self._connections: set[socket.socket] = set()
        # (HTTP method, path with query) of every request, newest last: what clients did.
        self.request_log: deque[tuple[str, str]] = deque(maxlen=REQUEST_LOG_SIZE)

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the API server is not running: call start() first")
        return f"https://{self._httpd.authority}"

    def start(self) -> str:
        """Bind, serve in a background thread and return the base URL."""
        if self._httpd is not None:
            return self.url
        self.stopping.clear()
        self._httpd = _HttpServer(self._address, _Handler, self, self.tls.server_context())
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": POLL_SECONDS / 5},  # stop() waits at most this long
            name="k8s-api-emulator",
            daemon=True,
        )
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop accepting, end watch and log streams, and drop idle keep-alive connections."""
        if self._httpd is None:
            return
        self.stopping.set()
        with self._lock:
            watches = list(self._watches)
        for stream in watches:
            stream.close()
        with self._changed:  # let each stream write its closing chunk before cutting sockets
            self._changed.wait_for(lambda: not self._watches, timeout=STOP_GRACE_SECONDS)
        self._httpd.shutdown()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=STOP_GRACE_SECONDS)
        self._httpd = self._thread = None

    @property
    def open_watches(self) -> int:
        """How many watch streams are being served right now."""
        with self._lock:
            return len(self._watches)

    def write_kubeconfig(self, path: Path | str, cluster_name: str = "sim") -> Path:
        """A kubeconfig pointing at this server, with its token (see `labs.sim.kubeconfig`)."""
        document = kubeconfig_document(self.url, cluster_name, self.token, self.tls.ca_data)
        return write_kubeconfig(path, document)

    def authenticated(self, authorization: str) -> bool:
        """The `Authorization` header carries this server's token, or one `also_accept` takes."""
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() != "bearer" or not given:
            return False
        return hmac.compare_digest(given.strip(), self.token) or self._also_accept(given.strip())

    def __enter__(self) -> ApiServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _track(self, registry: set, item: Any, add: bool) -> None:
        with self._changed:
            (registry.add if add else registry.discard)(item)
            self._changed.notify_all()


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], handler: type, api: ApiServer, tls: ssl.SSLContext
    ) -> None:
        self.api = api
        self.tls = tls
        super().__init__(address, handler)
        # `host:port` as bound (the OS picks the port when asked for 0), read from the socket:
        # typeshed allows a bytes host in `server_address`, which an AF_INET socket never gives.
        host, port = self.socket.getsockname()[:2]
        self.authority = f"{host}:{port}"

    def get_request(self) -> tuple[socket.socket, Any]:
        """Wrap each connection in TLS; the handshake happens in its own handler thread."""
        connection, address = super().get_request()
        wrapped = self.tls.wrap_socket(connection, server_side=True, do_handshake_on_connect=False)
        return wrapped, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that fails the TLS handshake (or leaves mid-way) is not the server's error."""
        log.debug("connection from %s failed", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HttpServer

    # ---- plumbing --------------------------------------------------------------------

    request: ssl.SSLSocket

    def setup(self) -> None:
        self.request.do_handshake()
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.api._track(self.api._connections, self.connection, True)

    def finish(self) -> None:
        self.api._track(self.api._connections, self.connection, False)
        try:
            super().finish()
        except OSError:
            pass

    @property
    def api(self) -> ApiServer:
        return self.server.api

    @property
    def store(self) -> ObjectStore:
        return self.server.api.store

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def do_OPTIONS(self) -> None:
        self._handle("OPTIONS")

    def _handle(self, method: str) -> None:
        details = None
        self.api.request_log.append((method, self.path))
        try:
            self.body = self._read_body()
            url = urlsplit(self.path)
            if url.path not in PUBLIC_PATHS and not self.api.authenticated(
                self.headers.get("Authorization", "")
            ):
                raise Unauthorized("Unauthorized")
            self.query = dict(parse_qsl(url.query))
            segments = [unquote(part) for part in url.path.split("/") if part]
            target = self._target(segments)
            if target is None:
                self._serve_document(method, segments)
            else:
                details = target.details
                self._serve_resource(method, target)
        except StoreError as error:
            self._send_json(error.code, status_body(error, details))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as error:  # a bug here must still answer a Status, not hang kubectl
            log.exception("emulator failed on %s %s", method, self.path)
            failure = StoreError(f"internal error in the API emulator: {error}")
            self._send_json(500, status_body(failure))

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while (size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)) > 0:
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _json_body(self) -> Any:
        if self.headers.get("Content-Type", "").startswith(api_protobuf.PROTOBUF):
            try:
                return api_protobuf.decode(self.body)
            except ValueError as error:
                raise BadRequest(f"the request body is not valid protobuf: {error}") from None
        try:
            return json.loads(self.body or b"null")
        except ValueError as error:
            raise BadRequest(f"the request body is not valid JSON: {error}") from None

    def _send_json(self, code: int, body: Any, content_type: str = "application/json") -> None:
        self._send_bytes(code, json.dumps(body, separators=(",", ":")).encode(), content_type)

    def _send_bytes(self, code: int, data: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _client_gone(self) -> bool:
        """True once the peer closed its side (a watching client that went away)."""
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:  # peek at the TCP stream under TLS: b"" once the peer closed it
            return socket.socket.recv(self.connection, 1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _wants_table(self) -> bool:
        return "as=Table" in self.headers.get("Accept", "")

    # ---- fixed documents -------------------------------------------------------------

    def _serve_document(self, method: str, segments: list[str]) -> None:
        control = self.api.controls.get("/".join(segments))
        if control is not None:
            self._send_json(200, control(method, self._json_body() if self.body else None))
            return
        if method != "GET":
            raise MethodNotAllowed(
                "the server does not allow this method on the requested resource"
            )
        path = "/".join(segments)
        types = self.store.resource_types()
        if path in ("healthz", "livez", "readyz"):
            self._send_bytes(200, b"ok", "text/plain; charset=utf-8")
        elif path == "version":
            self._send_json(200, api_discovery.KUBERNETES_VERSION)
        elif path == "api":
            self._send_json(200, api_discovery.api_versions(self.server.authority))
        elif path == "apis":
            self._send_json(200, api_discovery.api_group_list(types))
        elif len(segments) == 2 and segments[0] == "apis":
            versions = api_discovery.group_versions(types).get(segments[1])
            if not versions:
                raise _unknown_path()
            self._send_json(200, api_discovery.api_group(segments[1], versions))
        elif path.startswith("openapi/v3"):
            index, documents = openapi.served(frozenset(types))
            prefix = path.removeprefix("openapi/v3").strip("/")
            if not prefix:
                self._send_json(200, index)
            elif prefix in documents:
                self._send_json(200, documents[prefix])
            else:
                raise _unknown_path()
        else:
            group_version = self._group_version(segments)
            if group_version is None or len(segments) != (2 if segments[0] == "api" else 3):
                raise _unknown_path()
            members = self._types_in(*group_version)
            if not members:
                raise _unknown_path()
            name = "/".join(segments[1:])
            self._send_json(200, api_discovery.api_resource_list(name, list(members.values())))

    # ---- routing ---------------------------------------------------------------------

    @staticmethod
    def _group_version(segments: list[str]) -> tuple[str, str] | None:
        if len(segments) >= 2 and segments[0] == "api":
            return "", segments[1]
        if len(segments) >= 3 and segments[0] == "apis":
            return segments[1], segments[2]
        return None

    def _types_in(self, group: str, version: str) -> dict[str, ResourceType]:
        return {
            rtype.plural: rtype
            for rtype in self.store.resource_types()
            if rtype.group == group and rtype.version == version
        }

    def _target(self, segments: list[str]) -> _Target | None:
        """The resource a URL names, None for discovery documents; 404 for unknown ones."""
        group_version = self._group_version(segments)
        if group_version is None:
            return None
        rest = segments[2:] if group_version[0] == "" else segments[3:]
        if not rest:
            return None
        types = self._types_in(*group_version)
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] in types:
            namespace, rest = rest[1], rest[2:]
        rtype = types.get(rest[0])
        if rtype is None or len(rest) > 3:
            raise _unknown_path()
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        wrong_scope = (namespace is not None) != rtype.namespaced and name is not None
        if wrong_scope or (namespace and not rtype.namespaced):
            raise _unknown_path()
        if subresource is not None and subresource not in rtype.subresources:
            raise _unknown_path()
        return _Target(rtype, namespace, name, subresource)

    def _serve_resource(self, method: str, target: _Target) -> None:
        if "dryRun" in self.query and method in ("POST", "PUT", "PATCH", "DELETE"):
            raise BadRequest("dry run is not supported by the API emulator: run without --dry-run")
        if target.rtype in api_reviews.REVIEW_TYPES:
            if target.name is not None:
                raise _unknown_path()
            handlers = {"POST": self._review}
        elif target.subresource == "log":
            handlers = {"GET": self._get_log}
        elif target.subresource in api_stream.SUBRESOURCES:
            handlers = {"GET": self._stream, "POST": self._stream}
        elif target.subresource == "scale":
            handlers = {"GET": self._get_scale, "PUT": self._replace_scale, "PATCH": self._patch}
        elif target.name is None:
            handlers = {"GET": self._list_or_watch, "POST": self._create}
        else:
            handlers = {"GET": self._get, "PUT": self._replace, "PATCH": self._patch}
            if target.subresource is None:
                handlers["DELETE"] = self._delete
        handler = handlers.get(method)
        if handler is None:
            raise MethodNotAllowed(
                f"{method} is not allowed on {self.path.split('?')[0]}: "
                f"use one of {', '.join(sorted(handlers))}"
            )
        handler(target)

    # ---- verbs -----------------------------------------------------------------------

    def _respond_object(self, code: int, target: _Target, obj: dict) -> None:
        if self._wants_table():
            body = api_tables.table(
                target.rtype, [obj], obj["metadata"]["resourceVersion"], self._include_object()
            )
            self._send_json(code, body)
        else:
            self._send_json(code, obj)

    def _include_object(self) -> bool:
        return self.query.get("includeObject") != "None"

    def _get(self, target: _Target) -> None:
        obj = self.store.get(target.rtype, target.object_name, target.namespace)
        self._respond_object(200, target, obj)

    def _list_or_watch(self, target: _Target) -> None:
        if self.query.get("watch") in ("true", "1"):
            self._watch(target)
            return
        items, resource_version = self.store.list(
            target.rtype,
            target.namespace,
            self.query.get("labelSelector", ""),
            self.query.get("fieldSelector", ""),
        )
        if self._wants_table():
            body = api_tables.table(target.rtype, items, resource_version, self._include_object())
        else:
            body = {
                "kind": f"{target.rtype.kind}List",
                "apiVersion": target.rtype.api_version,
                "metadata": {"resourceVersion": resource_version},
                "items": items,
            }
        self._send_json(200, body)

    def _create(self, target: _Target) -> None:
        created = self.store.create(target.rtype, self._json_body(), target.namespace)
        self._respond_object(201, target, created)

    def _review(self, target: _Target) -> None:
        self._send_json(201, api_reviews.answer(target.rtype, self._json_body()))

    def _replace(self, target: _Target) -> None:
        obj = self._json_body()
        given = (obj.get("metadata") or {}).get("name") if isinstance(obj, dict) else None
        if given != target.name:
            raise BadRequest(
                f"the name of the object ({given}) does not match the name on the URL "
                f"({target.name})"
            )
        replaced = self.store.replace(target.rtype, obj, target.namespace, target.subresource)
        self._respond_object(200, target, replaced)

    def _get_scale(self, target: _Target) -> None:
        scale = api_scale.read_scale(self.store, target.rtype, target.object_name, target.namespace)
        self._send_json(200, scale)

    def _replace_scale(self, target: _Target) -> None:
        scale = api_scale.replace_scale(
            self.store, target.rtype, target.object_name, target.namespace, self._json_body()
        )
        self._send_json(200, scale)

    def _patch(self, target: _Target) -> None:
        media_type = self.headers.get("Content-Type", "").split(";")[0].strip()
        patch_type = PATCH_TYPES.get(media_type)
        if media_type == "application/apply-patch+yaml":
            raise UnsupportedMediaType(
                "server-side apply is not supported by the API emulator: use `kubectl apply` "
                "without --server-side, or a merge patch"
            )
        if patch_type == "strategic" and target.rtype not in BUILTIN_TYPES:
            patch_type = None  # as on a real server: custom resources have no patch strategy
        if patch_type is None:
            accepted = [media for media, kind in PATCH_TYPES.items() if kind != "strategic"]
            if target.rtype in BUILTIN_TYPES:
                accepted = list(PATCH_TYPES)
            raise UnsupportedMediaType(
                f"the body of the request was in an unknown format ({media_type or 'none'}) - "
                f"accepted media types include: {', '.join(accepted)}"
            )
        if target.subresource == "scale":
            scale = api_scale.patch_scale(
                self.store,
                target.rtype,
                target.object_name,
                target.namespace,
                self._json_body(),
                patch_type,
            )
            self._send_json(200, scale)
            return
        patched = self.store.patch(
            target.rtype,
            target.object_name,
            self._json_body(),
            patch_type,
            target.namespace,
            target.subresource,
        )
        self._respond_object(200, target, patched)

    def _delete(self, target: _Target) -> None:
        options = self._json_body() if self.body else None  # DeleteOptions
        preconditions = options.get("preconditions") if isinstance(options, dict) else None
        deleted = self.store.delete(
            target.rtype, target.object_name, target.namespace, preconditions or None
        )
        self._send_json(200, deleted)

    # ---- streams ---------------------------------------------------------------------

    def _watch(self, target: _Target) -> None:
        timeout = self._int_query("timeoutSeconds", DEFAULT_WATCH_SECONDS)
        try:
            stream = self.store.watch(
                target.rtype,
                target.namespace,
                self.query.get("resourceVersion"),
                self.query.get("labelSelector", ""),
                self.query.get("fieldSelector", ""),
            )
        except Gone as error:  # as on a real server: a 200 stream carrying one ERROR event
            self._start_stream("application/json")
            self._write_event("ERROR", status_body(error))
            self._write_chunk(b"")
            return
        self.api._track(self.api._watches, stream, True)
        try:
            self._start_stream("application/json")
            for event_type, obj in self._events(stream, time.monotonic() + timeout):
                if self._wants_table():
                    resource_version = obj["metadata"]["resourceVersion"]
                    include = self._include_object()
                    obj = api_tables.table(target.rtype, [obj], resource_version, include)
                self._write_event(event_type, obj)
            self._write_chunk(b"")
        except OSError:  # the client went away mid-write
            self.close_connection = True
        finally:
            stream.close()
            self.api._track(self.api._watches, stream, False)

    def _events(self, stream: Watch, deadline: float) -> Iterator[tuple[str, dict]]:
        while not self.api.stopping.is_set() and (remaining := deadline - time.monotonic()) > 0:
            event = stream.next(timeout=min(POLL_SECONDS, remaining))
            if event is not None:
                yield event
            elif stream.closed or self._client_gone():
                return

    def _write_event(self, event_type: str, obj: dict) -> None:
        line = json.dumps({"type": event_type, "object": obj}, separators=(",", ":")) + "\n"
        self._write_chunk(line.encode())

    def _int_query(self, key: str, default: int) -> int:
        value = self.query.get(key)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError:
            raise BadRequest(f"{key} must be an integer, got {value!r}") from None

    def _stream(self, target: _Target) -> None:
        runtime = self.api.runtime
        if runtime is None:
            raise BadRequest("exec and attach need a rehearsal world behind the emulator")
        self.close_connection = True  # the stream owns the connection to its end
        where = (target.namespace or "default", target.object_name, str(target.subresource))
        headers = list(self.headers.items())
        api_stream.serve(self.path, headers, self.connection, self.rfile, runtime, where)

    def _get_log(self, target: _Target) -> None:
        namespace = target.namespace or "default"
        name = target.object_name
        pod = self.store.get(PODS, name, namespace)
        self._check_log_container(pod)
        text = self.store.pod_log(namespace, name)
        shown = text
        if "tailLines" in self.query:
            lines = text.splitlines(keepends=True)
            shown = "".join(lines[max(len(lines) - self._int_query("tailLines", 0), 0) :])
        content_type = "text/plain; charset=utf-8"
        if self.query.get("follow") not in ("true", "1"):
            self._send_bytes(200, shown.encode(), content_type)
            return
        self._start_stream(content_type)
        try:
            if shown:
                self._write_chunk(shown.encode())
            self._follow_log(namespace, name, len(text))
            self._write_chunk(b"")
        except OSError:
            self.close_connection = True

    def _follow_log(self, namespace: str, name: str, offset: int) -> None:
        """Stream appended log text until the pod ends or goes, or the client leaves."""
        while not self.api.stopping.is_set() and not self._client_gone():
            more = self.store.wait_pod_log(namespace, name, offset, POLL_SECONDS)
            if more:
                self._write_chunk(more.encode())
                offset += len(more)
                continue
            try:
                phase = self.store.get(PODS, name, namespace).get("status", {}).get("phase")
            except NotFound:
                return
            if phase in ("Succeeded", "Failed"):
                return

    def _check_log_container(self, pod: dict) -> None:
        spec = pod.get("spec") or {}
        containers = [c["name"] for c in spec.get("containers") or []]
        all_containers = containers + [c["name"] for c in spec.get("initContainers") or []]
        wanted = self.query.get("container")
        name = pod["metadata"]["name"]
        if wanted and wanted not in all_containers:
            raise BadRequest(f"container {wanted} is not valid for pod {name}")
        if not wanted and len(containers) > 1:
            raise BadRequest(
                f"a container name must be specified for pod {name}, "
                f"choose one of: [{' '.join(containers)}]"
            )
