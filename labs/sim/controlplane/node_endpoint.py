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
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from labs.sim.controlplane import build, pki
from labs.sim.controlplane.run import (
    STOP_TIMEOUT,
    ControlPlaneError,
    free_port,
    reap,
    spawn,
    wait_answering,
)
from labs.sim.tls import LOOPBACK


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
    port: int = 0
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def log(self) -> Path:
        return self.home / "logs" / f"{build.NODE_ENDPOINT}.log"

    @property
    def url(self) -> str:
        return f"https://{LOOPBACK}:{self.port}"

    def start(self, say: Callable[[str], None] = print) -> int:
        """Build (or find) the program, start it on a free loopback port and wait until /healthz
        answers; returns the port. A failed start stops the process and names its log."""
        binary = build.node_endpoint_binary(say)
        self.port = free_port()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._process = spawn([str(binary), *self._args()], self.log)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
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
        ]

    def _wait_healthy(self) -> None:
        def alive() -> None:
            assert self._process is not None
            if self._process.poll() is not None:
                raise ControlPlaneError(
                    f"{build.NODE_ENDPOINT} exited with {self._process.returncode}; its log is "
                    f"{self.log}"
                )

        context = ssl.create_default_context(cadata=self.ca.cert_pem)
        wait_answering(f"{self.url}/healthz", context, alive, build.NODE_ENDPOINT, self.log)

    def stop(self) -> None:
        """Stop the process (its exec children die with it); kill it if it does not stop."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        reap(process, STOP_TIMEOUT)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None
