"""Run the node endpoint: the one kubelet API that every simulated node of a lab points at.

The API server reaches a node's kubelet at its InternalIP and
`status.daemonEndpoints.kubeletEndpoint.Port`; give every simulated node 127.0.0.1 and this
endpoint's port, and `kubectl logs/exec/attach/port-forward` reach the lab's files and
programs through the kubelet's own streaming code (`go/controlplane/cmd/node-endpoint`):

- logs: `<logs_dir>/<namespace>_<pod>/<container>.log`, CRI log format
  (`<RFC3339Nano> stdout|stderr F <line>`);
- exec: `<exec_command...> exec <namespace> <pod> <container> [--tty] -- <command...>`, attach:
  `<exec_command...> attach <namespace> <pod> <container> [--tty]`, with the stream's stdin,
  stdout and stderr; the exit code is the command's;
- port-forward: `<ports_dir>/<namespace>_<pod>/<port>` holds the `host:port` to dial.

It serves a certificate of the lab's CA and takes only clients that CA signed (the API
server's kubelet client certificate), and it dies with its starter, as the control plane does.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labs.sim.controlplane import build, pki
from labs.sim.controlplane.run import Served, free_port
from labs.sim.controlplane.tls import LOOPBACK


@dataclass
class NodeEndpoint:
    """One node-endpoint process and its files (certificates in `home/pki`, log in `home/logs`)."""

    home: Path
    # The CA that issues the serving certificate and signs the clients it accepts: the control
    # plane's (`ControlPlane.ca`), whose kubelet client certificate the API server presents.
    ca: pki.Authority
    exec_command: list[str]
    logs_dir: Path
    ports_dir: Path
    # Serve the API server's egress here too (`ControlPlane.egress_socket`): CONNECT tunnels to
    # any node's kubelet port end at this endpoint, so nodes keep their VPC addresses.
    connect_socket: Path | None = None
    # The nodes' resource metrics (`<node IP>.prom`) and the Services' routes (`<ip>_<port>`
    # holding the host:port behind it), both written by the world; None serves neither.
    metrics_dir: Path | None = None
    routes_dir: Path | None = None
    # Serve the same CONNECT proxy on loopback TCP too (`proxy_url`), for programs that take
    # HTTPS_PROXY (metrics-server reaching the nodes).
    connect_tcp: bool = False
    port: int = 0
    connect_port: int = 0
    _served: Served = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._served = Served(
            build.NODE_ENDPOINT, self.home / "logs" / f"{build.NODE_ENDPOINT}.log"
        )

    @property
    def log(self) -> Path:
        return self._served.log

    @property
    def proxy_url(self) -> str:
        """HTTPS_PROXY for a program that reaches the nodes as the API server does."""
        return f"http://{LOOPBACK}:{self.connect_port}"

    @property
    def url(self) -> str:
        return f"https://{LOOPBACK}:{self.port}"

    def start(self, say: Callable[[str], None] = print) -> int:
        """Build (or find) the program, start it on a free loopback port and wait until /healthz
        answers; returns the port. A failed start stops the process and names its log."""
        binary = build.node_endpoint_binary(say)
        self.port = free_port()
        self.connect_port = free_port() if self.connect_tcp else 0
        context = ssl.create_default_context(cadata=self.ca.cert_pem)
        self._served.start([str(binary), *self._args()], f"{self.url}/healthz", context)
        return self.port

    def _args(self) -> list[str]:
        pki_dir = self.home / "pki"
        serving = self.ca.issue(build.NODE_ENDPOINT, server=True, addresses=(LOOPBACK,))
        cert = pki.write_private(pki_dir / f"{build.NODE_ENDPOINT}.crt", serving.cert_pem)
        key = pki.write_private(pki_dir / f"{build.NODE_ENDPOINT}.key", serving.key_pem)
        client_ca = pki.write_private(
            pki_dir / f"{build.NODE_ENDPOINT}-client-ca.crt", self.ca.cert_pem
        )
        return [
            f"--listen={LOOPBACK}:{self.port}",
            f"--tls-cert-file={cert}",
            f"--tls-private-key-file={key}",
            f"--client-ca-file={client_ca}",
            *(f"--exec-command={word}" for word in self.exec_command),
            f"--logs-dir={self.logs_dir}",
            f"--ports-dir={self.ports_dir}",
            *([f"--connect-socket={self.connect_socket}"] if self.connect_socket else []),
            *([f"--connect-listen={LOOPBACK}:{self.connect_port}"] if self.connect_port else []),
            *([f"--metrics-dir={self.metrics_dir}"] if self.metrics_dir else []),
            *([f"--routes-dir={self.routes_dir}"] if self.routes_dir else []),
        ]

    def stop(self) -> None:
        """Stop the process (its exec children die with it); kill it if it does not stop."""
        self._served.stop()

    @property
    def pid(self) -> int | None:
        return self._served.pid

    def described(self) -> dict[str, dict[str, Any]]:
        return self._served.described()
