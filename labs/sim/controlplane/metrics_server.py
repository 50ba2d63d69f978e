"""Run the real metrics-server for one rehearsal lab, as the EKS metrics-server addon runs it.

It talks to the API server as the addon's ServiceAccount (a client certificate of the lab's CA
named `system:serviceaccount:kube-system:metrics-server`, so the addon's RBAC applies), and
scrapes every node's kubelet at its InternalIP:10250 the way the API server reaches a node:
through the node endpoint's CONNECT proxy (Go's HTTPS_PROXY), which ends the tunnel at the
node endpoint's `/metrics/resource`. The API server's aggregator reaches it in turn through
the Service's route (`<cluster IP>_443`, written by the world). Like the API server, it does
not verify kubelet serving certificates (one endpoint plays every node's address).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from labs.sim.controlplane import build, pki
from labs.sim.controlplane.run import METRICS_SERVER_USER, BesidePlane
from labs.sim.controlplane.tls import LOOPBACK

# The addon's own setting (15 s on EKS); metrics-server refuses less than 10 s.
METRIC_RESOLUTION = "10s"


@dataclass
class MetricsServer(BesidePlane):
    """One metrics-server process and its files (serving certificate in `home/pki`); the
    aggregator's route to the Service leads to its `address`."""

    # HTTPS_PROXY: the node endpoint's CONNECT proxy on loopback TCP (`NodeEndpoint.proxy_url`).
    proxy_url: str = field(kw_only=True)
    program: ClassVar[str] = build.METRICS_SERVER

    def start(self, say: Callable[[str], None] = print) -> None:
        """Build (or find) the program, start it and wait until /livez answers."""
        assert self.plane.ca is not None, "the control plane starts first"
        binary = build.pinned_binary(build.METRICS_SERVER_PROGRAM, say)
        context = ssl.create_default_context(cadata=self.plane.ca.cert_pem)
        url = f"https://{self.address}/livez"
        env = {"HTTPS_PROXY": self.proxy_url}
        self._served.start([str(binary), *self._args(self.plane.ca)], url, context, env)

    def _args(self, ca: pki.Authority) -> list[str]:
        serving = ca.issue(build.METRICS_SERVER, server=True, addresses=(LOOPBACK,))
        cert = pki.write_private(self.home / "pki" / "metrics-server.crt", serving.cert_pem)
        key = pki.write_private(self.home / "pki" / "metrics-server.key", serving.key_pem)
        kubeconfig = self.plane.write_kubeconfig(METRICS_SERVER_USER)
        return [
            f"--bind-address={LOOPBACK}",
            f"--secure-port={self.port}",
            f"--tls-cert-file={cert}",
            f"--tls-private-key-file={key}",
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--kubelet-preferred-address-types=InternalIP",
            "--kubelet-use-node-status-port",
            "--kubelet-insecure-tls",
            f"--metric-resolution={METRIC_RESOLUTION}",
            "--kubelet-request-timeout=5s",
        ]
