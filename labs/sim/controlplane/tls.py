"""TLS for the lab's own small servers on loopback (the API server's token webhook): a
certificate of the lab's CA, as a server-side SSL context."""

from __future__ import annotations

import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class ServerTls:
    """A CA certificate and a server certificate (with its key) it signed, all PEM."""

    ca_pem: str
    cert_pem: str
    key_pem: str

    def server_context(self) -> ssl.SSLContext:
        """What a listening socket wraps its connections with."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory() as scratch:  # load_cert_chain reads only files
            chain, key = Path(scratch, "chain.pem"), Path(scratch, "key.pem")
            chain.write_text(self.cert_pem + self.ca_pem)
            key.write_text(self.key_pem)
            context.load_cert_chain(chain, key)
        return context
