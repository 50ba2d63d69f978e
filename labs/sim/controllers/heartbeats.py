"""Each node's kubelet heartbeat: its Lease in kube-node-lease, renewed every few seconds.

kube-controller-manager's node lifecycle controller marks a node NotReady (and taints it)
when its Lease has not been renewed within the node-monitor grace period; the real kubelet
renews every 10 s (a quarter of the 40 s lease). Here the renewal keeps real time whatever
the world's pace, because the controller manager that reads it keeps real time too.
"""

from __future__ import annotations

from datetime import UTC, datetime

from labs.kube.resources import LEASES, NODES, AlreadyExists, NotFound
from labs.sim.controllers.base import Controller

NODE_LEASES = "kube-node-lease"
LEASE_SECONDS = 40
RENEW_SECONDS = 5.0


class NodeLeases(Controller):
    """Renews the Lease of every node the world runs; a new node gets one at once."""

    watched = (NODES,)

    def reconcile(self) -> float | None:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        for node in self.store.list(NODES)[0]:
            self._renew(node, stamp)
        return RENEW_SECONDS

    def _renew(self, node: dict, stamp: str) -> None:
        name = node["metadata"]["name"]
        try:
            self.store.patch(LEASES, name, {"spec": {"renewTime": stamp}}, NODE_LEASES)
            return
        except NotFound:
            pass
        lease = {
            "metadata": {
                "name": name,
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": name,
                     "uid": node["metadata"]["uid"]}
                ],
            },
            "spec": {
                "holderIdentity": name,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": stamp,
            },
        }  # fmt: skip
        try:
            self.store.create(LEASES, lease, NODE_LEASES)
        except AlreadyExists:
            pass
