"""TLS for the API emulator: a CA and a loopback server certificate, fresh per world.

kubectl and client-go send no credentials to a plain-HTTP API server (clientcmd applies a
user's token only over TLS), so an emulator that requires a bearer token must serve HTTPS,
as EKS does. The CA travels in the kubeconfig (`certificate-authority-data`) and in the EKS
cluster's `certificateAuthority`, exactly where EKS puts its own.
"""

from __future__ import annotations

import base64
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from labs.sim.controlplane.pki import Authority

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class ServerTls:
    """A CA certificate and a server certificate (with its key) it signed, all PEM."""

    ca_pem: str
    cert_pem: str
    key_pem: str

    @property
    def ca_data(self) -> str:
        """The CA as a kubeconfig's certificate-authority-data (base64 of the PEM)."""
        return base64.b64encode(self.ca_pem.encode()).decode()

    def server_context(self) -> ssl.SSLContext:
        """What the emulator's listening socket wraps its connections with."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory() as scratch:  # load_cert_chain reads only files
            chain, key = Path(scratch, "chain.pem"), Path(scratch, "key.pem")
            chain.write_text(self.cert_pem + self.ca_pem)
            key.write_text(self.key_pem)
            context.load_cert_chain(chain, key)
        return context


def new_server_tls(host: str = LOOPBACK) -> ServerTls:
    """A fresh CA (named like EKS's, "kubernetes") and a certificate for `host` it signed."""
    ca = Authority.new()
    server = ca.issue("kube-apiserver", server=True, addresses=(host,))
    return ServerTls(ca.cert_pem, server.cert_pem, server.key_pem)
