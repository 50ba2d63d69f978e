"""The API server's webhooks, as EKS has them: who an `aws eks get-token` token is (a
TokenReview), and what its access entry allows where RBAC grants nothing (a
SubjectAccessReview); anything else is refused.

kube-apiserver asks these endpoints over HTTPS, signed by the lab's CA; the answers are the
caller's (`Access`): the rehearsal's EKS access entries, checked against its own AWS keys.
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Callable, Mapping
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from labs.sim.controlplane import pki
from labs.sim.controlplane.kubeconfig import kubeconfig_document, write_kubeconfig
from labs.sim.controlplane.tls import ServerTls

REVIEW_PATH = "/tokenreview"
AUTHORIZE_PATH = "/authorize"
REFUSED = "not a token of this lab (aws eks get-token for this cluster, with its keys)"


class Access(Protocol):
    """Who a token is and what they may do (the world's EKS access entries)."""

    def user(self, token: str) -> dict[str, Any] | None:
        """The TokenReview user of `token`, or None when it is not the lab's."""

    def allowed(self, review: dict[str, Any]) -> bool:
        """Whether a SubjectAccessReview's spec is allowed."""


def review_answer(review: dict[str, Any], *, access: Access) -> dict[str, Any]:
    """The TokenReview the API server gets back: authenticated (with the user) or not."""
    token = str((review.get("spec") or {}).get("token", ""))
    user = access.user(token) if token else None
    status: dict[str, Any] = (
        {"authenticated": True, "user": user}
        if user is not None
        else {"authenticated": False, "error": REFUSED}
    )
    return {**_kind(review, "authentication.k8s.io/v1", "TokenReview"), "status": status}


def access_answer(review: dict[str, Any], *, access: Access) -> dict[str, Any]:
    """The SubjectAccessReview the API server gets back: allowed, or no opinion."""
    allowed = access.allowed(review.get("spec") or {})
    status = {"allowed": allowed, "reason": "EKS access policy" if allowed else ""}
    return {**_kind(review, "authorization.k8s.io/v1", "SubjectAccessReview"), "status": status}


def _kind(review: dict[str, Any], api_version: str, kind: str) -> dict[str, str]:
    return {"apiVersion": review.get("apiVersion", api_version), "kind": kind}


_ANSWERS: dict[str, Callable[..., dict[str, Any]]] = {
    REVIEW_PATH: review_answer,
    AUTHORIZE_PATH: access_answer,
}


Answer = Callable[[dict[str, Any]], dict[str, Any]]


def serve_webhook(
    host: str, tls: ssl.SSLContext, answers: Mapping[str, Answer], name: str
) -> ThreadingHTTPServer:
    """An HTTPS server on a free port of `host` that the API server calls: each JSON POST is
    answered by its path's function (the query, `?timeout=10s`, ignored), on a connection kept
    alive so the API server makes no TLS handshake per review."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            answer = answers.get(urlsplit(self.path).path)
            if answer is None:
                self.send_error(404)
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                review = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self.send_error(400, "request is not JSON")
                return
            body = json.dumps(answer(review)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            """Quiet: the API server logs a webhook it could not reach or was refused by."""

    server = ThreadingHTTPServer((host, 0), Handler)
    server.daemon_threads = True
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, name=name, daemon=True).start()
    return server


def stop_webhook(server: ThreadingHTTPServer | None) -> None:
    """Stop a `serve_webhook` server (None: none was started) and close its socket."""
    if server is not None:
        server.shutdown()
        server.server_close()


class AuthWebhook:
    """The HTTPS endpoints of both webhooks on loopback, for one control plane."""

    def __init__(self, access: Access, ca: pki.Authority) -> None:
        self._access = access
        self._ca = ca
        self._server: ThreadingHTTPServer | None = None

    def start(self, host: str) -> str:
        """Listen on a free port of `host`; returns the webhooks' base URL."""
        access = self._access
        answers = {path: partial(answer, access=access) for path, answer in _ANSWERS.items()}
        self._server = serve_webhook(host, self._tls(host), answers, "auth-webhook")
        return f"https://{host}:{self._server.server_address[1]}"

    def _tls(self, host: str) -> ssl.SSLContext:
        issued = self._ca.issue("auth-webhook", server=True, addresses=(host,))
        return ServerTls(self._ca.cert_pem, issued.cert_pem, issued.key_pem).server_context()

    def stop(self) -> None:
        stop_webhook(self._server)
        self._server = None


def write_webhook_config(path: Path, url: str, ca_data: str) -> Path:
    """The kubeconfig-shaped file a `--authentication-token-webhook-config-file` or
    `--authorization-webhook-config-file` reads."""
    document = kubeconfig_document(url, "auth-webhook", "", ca_data, "kube-apiserver", {})
    return write_kubeconfig(path, document)
