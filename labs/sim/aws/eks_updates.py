"""EKS node-group updates as EKS reports them: InProgress until the group has changed.

moto answers UpdateNodegroupConfig with an update that is already Successful, keeps
nothing, and has neither DescribeUpdate nor ListUpdates. On EKS a scaling update stays
InProgress while the group changes and the caller follows it with DescribeUpdate (Failed
carries the errors).
The world therefore records every node-group update here (through moto's own backend, in
this process), the node lifecycle controller settles a group's updates once its nodes
match the new size, and DescribeUpdate and ListUpdates are answered through moto's own HTTP
routing, so boto3 and the aws CLI reach them like any other EKS call.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from moto.core.responses import ActionResult
from moto.eks import urls as eks_urls
from moto.eks.exceptions import ResourceNotFoundException
from moto.eks.models import EKSBackend
from moto.eks.responses import EKSResponse

from labs.sim.aws import answers

IN_PROGRESS, SUCCESSFUL = "InProgress", "Successful"
DESCRIBE_UPDATE_PATH = "{0}/clusters/(?P<name>[^/]+)/updates/(?P<updateId>[^/]+)$"
LIST_UPDATES_PATH = "{0}/clusters/(?P<name>[^/]+)/updates$"
# scalingConfig key -> the update parameter type EKS reports for it
_SCALING_PARAMS = {"minSize": "MinSize", "maxSize": "MaxSize", "desiredSize": "DesiredSize"}


class UpdateLedger:
    """The node-group updates of this process's moto, by id (moto's state is per process too)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._updates: dict[str, tuple[str, str, dict[str, Any]]] = {}

    def record(self, cluster: str, nodegroup: str, update: dict[str, Any]) -> dict[str, Any]:
        """Keep `update` as InProgress and return what the caller of the update sees."""
        update = dict(update, status=IN_PROGRESS)
        with self._lock:
            self._updates[update["id"]] = (cluster, nodegroup, update)
            return copy.deepcopy(update)

    def in_progress(self, cluster: str, nodegroup: str) -> set[str]:
        """The ids of the group's updates in progress now. Each was recorded after moto took
        its new size, so a group described after this call already has their sizes."""
        with self._lock:
            return {update_id for update_id, (owner, group, update) in self._updates.items()
                    if (owner, group) == (cluster, nodegroup)
                    and update["status"] == IN_PROGRESS}  # fmt: skip

    def settle(self, update_ids: set[str]) -> None:
        """The group reached the size these updates set: they are Successful. An update
        recorded after the group was described is left InProgress for the next pass."""
        with self._lock:
            for update_id in update_ids & self._updates.keys():  # clear() may have run
                self._updates[update_id][2]["status"] = SUCCESSFUL

    def describe(self, cluster: str, update_id: str, nodegroup: str | None) -> dict[str, Any]:
        with self._lock:
            found = self._updates.get(update_id)
            if found is None or found[0] != cluster or (nodegroup and found[1] != nodegroup):
                raise ResourceNotFoundException(
                    clusterName=cluster,
                    nodegroupName=nodegroup,
                    fargateProfileName=None,
                    addonName=None,
                    message=f"No update found for ID: {update_id}",
                )
            return copy.deepcopy(found[2])

    def ids(self, cluster: str, nodegroup: str | None) -> list[str]:
        """The ids of one node group's updates, oldest first; without a node group, the
        cluster's own (as EKS lists them: none here, only node groups are updated)."""
        with self._lock:
            return [update_id for update_id, (owner, group, _) in self._updates.items()
                    if owner == cluster and group == nodegroup]  # fmt: skip

    def clear(self) -> None:
        with self._lock:
            self._updates.clear()


LEDGER = UpdateLedger()
_installed = threading.Lock()
_original_update = EKSBackend.update_nodegroup_config


def _update_nodegroup_config(self: EKSBackend, *args: Any, **kwargs: Any) -> dict[str, Any]:
    update = _original_update(self, *args, **kwargs)
    scaling = kwargs.get("scaling_config") or {}
    params = [{"type": kind, "value": str(scaling[key])} for key, kind in _SCALING_PARAMS.items()
              if key in scaling]  # fmt: skip
    others = [p for p in update["params"] if p["type"] != "ScalingConfig"]
    update["params"] = params + others
    answers.resize_group(self, kwargs["cluster_name"], kwargs["nodegroup_name"])
    return LEDGER.record(kwargs["cluster_name"], kwargs["nodegroup_name"], update)


def _describe_update(self: EKSResponse) -> ActionResult:
    update = LEDGER.describe(
        self._get_param("name"), self._get_param("updateId"), self._get_param("nodegroupName")
    )
    return ActionResult({"update": update})


def _list_updates(self: EKSResponse) -> ActionResult:
    """`aws eks list-updates --name C [--nodegroup-name N]` (moto has no ListUpdates)."""
    name = self._get_param("name")
    self.eks_backend.describe_cluster(name)  # ResourceNotFoundException for another cluster
    return ActionResult({"updateIds": LEDGER.ids(name, self._get_param("nodegroupName"))})


def install() -> UpdateLedger:
    """Teach this process's moto EKS to keep and describe node-group updates (once; idempotent).

    Must run before a moto server first serves EKS: the server builds its routes then.
    """
    if _installed.acquire(blocking=False):
        EKSBackend.update_nodegroup_config = _update_nodegroup_config  # type: ignore[method-assign]
        EKSResponse.describe_update = _describe_update  # type: ignore[attr-defined]
        EKSResponse.list_updates = _list_updates  # type: ignore[attr-defined]
        eks_urls.url_paths[DESCRIBE_UPDATE_PATH] = eks_urls.response.dispatch
        eks_urls.url_paths[LIST_UPDATES_PATH] = eks_urls.response.dispatch
    return LEDGER
