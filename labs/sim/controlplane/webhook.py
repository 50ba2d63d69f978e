"""The API server's token authenticator, as EKS has one: `aws eks get-token` tokens map to the
lab's administrator, anything else is refused.

kube-apiserver asks this webhook about every bearer token it does not know (a TokenReview over
HTTPS, signed by the lab's CA); which tokens are good is the caller's decision (`accepts`), so
the rehearsal checks them against its own AWS keys and cluster name exactly as it does today.
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from labs.sim.controlplane import pki
from labs.sim.controlplane.kubeconfig import kubeconfig_document, write_kubeconfig
from labs.sim.controlplane.tls import ServerTls

# Who an accepted token is: the lab's administrator, in the group EKS's cluster creator had
# under aws-auth (RBAC then grants everything, as on a fresh EKS cluster).
ADMIN_USER = "lab-admin"
ADMIN_GROUPS = ["system:masters", "system:authenticated"]
REVIEW_PATH = "/tokenreview"


def review_answer(review: dict[str, Any], accepts: Callable[[str], bool]) -> dict[str, Any]:
    """The TokenReview the API server gets back: authenticated (with the admin) or not."""
    token = str((review.get("spec") or {}).get("token", ""))
    status: dict[str, Any] = {"authenticated": False}
    if token and accepts(token):
        status = {"authenticated": True, "user": {"username": ADMIN_USER, "groups": ADMIN_GROUPS}}
    else:
        status["error"] = (
            "not a token of this lab (aws eks get-token for this cluster, with its keys)"
        )
    kind = {
        "apiVersion": review.get("apiVersion", "authentication.k8s.io/v1"),
        "kind": "TokenReview",
    }
    return {**kind, "status": status}


class TokenWebhook:
    """An HTTPS TokenReview endpoint on loopback, for one control plane."""

    def __init__(self, accepts: Callable[[str], bool], ca: pki.Authority) -> None:
        self._accepts = accepts
        self._ca = ca
        self._server: ThreadingHTTPServer | None = None

    def start(self, host: str) -> str:
        """Listen on a free port of `host`; returns the webhook's URL."""
        accepts = self._accepts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    review = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    review = {}
                body = json.dumps(review_answer(review, accepts)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                """Quiet: the API server logs authentication failures itself."""

        server = ThreadingHTTPServer((host, 0), Handler)
        server.socket = self._tls(host).wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, name="token-webhook", daemon=True).start()
        self._server = server
        return f"https://{host}:{server.server_address[1]}{REVIEW_PATH}"

    def _tls(self, host: str) -> ssl.SSLContext:
        issued = self._ca.issue("token-webhook", server=True, addresses=(host,))
        return ServerTls(self._ca.cert_pem, issued.cert_pem, issued.key_pem).server_context()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def write_webhook_config(path: Path, url: str, ca_data: str) -> Path:
    """The kubeconfig-shaped file `--authentication-token-webhook-config-file` reads."""
    document = kubeconfig_document(url, "token-webhook", "", ca_data, "kube-apiserver", {})
    return write_kubeconfig(path, document)
