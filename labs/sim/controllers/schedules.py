"""EventBridge Scheduler: one-time schedules fire on the world's clock.

moto keeps schedules but never runs them. This controller runs them as the service does:
an ENABLED `at(...)` schedule whose moment has come on the world's clock (read in its
ScheduleExpressionTimezone) invokes its target once, as its role; with
ActionAfterCompletion DELETE the schedule is deleted afterwards. A failed invocation is
logged and not retried (the service retries for up to a day), and the schedule stays. A
universal target
(`arn:aws:scheduler:::aws-sdk:<service>:<apiAction>`) calls that API, through the same
moto, with the schedule's Input as the request; as on AWS the role must exist and allow
the action, or nothing happens. Recurring (rate/cron) schedules are not played.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import re
from collections.abc import Callable
from typing import Any

from botocore import xform_name
from botocore.exceptions import ClientError

from labs.aws.schedules import due_at
from labs.kube.informers import InformedKubeApi
from labs.sim.controllers.base import Controller
from labs.sim.timings import Timings, WorldClock

log = logging.getLogger(__name__)

UNIVERSAL_TARGET = re.compile(
    r"arn:aws:scheduler:::aws-sdk:(?P<service>[a-z0-9-]+):(?P<action>\w+)"
)


def allows(document: dict[str, Any], action: str) -> bool:
    """An Allow statement of the policy names `action` (IAM wildcards, any case)."""
    for statement in document.get("Statement", []):
        actions = statement.get("Action", [])
        actions = [actions] if isinstance(actions, str) else actions
        if statement.get("Effect") == "Allow" and any(
            fnmatch.fnmatch(action.lower(), pattern.lower()) for pattern in actions
        ):
            return True
    return False


class EventBridgeScheduler(Controller):
    """Fires the due one-time schedules of this world's moto, once each.

    It sleeps until the next schedule is due; a write to the schedules (the AWS endpoint calls
    `wake`) or a change of pace wakes it to look again, so an idle world never polls moto."""

    def __init__(
        self,
        store: InformedKubeApi,
        timings: Timings,
        clients: Callable[[str], Any],
        clock: WorldClock,
    ) -> None:
        super().__init__(store, timings)
        self._clients = clients
        self._clock = clock
        self._done: set[tuple[str, str]] = set()  # (arn, expression) already run and kept

    def reconcile(self) -> float | None:
        waits: list[float] = []
        scheduler = self._clients("scheduler")
        for page in scheduler.get_paginator("list_schedules").paginate(State="ENABLED"):
            for summary in page["Schedules"]:
                schedule = scheduler.get_schedule(
                    Name=summary["Name"], GroupName=summary["GroupName"]
                )
                moment = due_at(schedule)
                key = (schedule["Arn"], schedule["ScheduleExpression"])
                if moment is None or key in self._done:
                    continue
                if moment > self._clock.now():
                    waits.append(self._clock.wall_seconds_until(moment))
                    continue
                if self._fire(schedule) and schedule.get("ActionAfterCompletion") == "DELETE":
                    scheduler.delete_schedule(Name=summary["Name"], GroupName=summary["GroupName"])
                else:
                    self._done.add(key)
        return min(waits, default=None)

    def _fire(self, schedule: dict[str, Any]) -> bool:
        """Invoke the target once; False (and a log line) when it could not be invoked."""
        target = schedule["Target"]
        match = UNIVERSAL_TARGET.fullmatch(target["Arn"])
        if match is None:
            log.warning("schedule %s: target %s is not played", schedule["Name"], target["Arn"])
            return False
        service, action = match["service"], match["action"]
        permission = f"{service}:{action[:1].upper()}{action[1:]}"
        if not self._role_allows(target["RoleArn"], permission):
            log.warning(
                "schedule %s: role %s may not %s; target not invoked",
                schedule["Name"], target["RoleArn"], permission,
            )  # fmt: skip
            return False
        try:
            call = getattr(self._clients(service), xform_name(action))
            call(**json.loads(target.get("Input") or "{}"))
        except ClientError as error:
            log.warning("schedule %s: %s failed: %s", schedule["Name"], permission, error)
            return False
        log.info("schedule %s fired: %s %s", schedule["Name"], permission, target.get("Input"))
        return True

    def _role_allows(self, role_arn: str, permission: str) -> bool:
        iam = self._clients("iam")
        name = role_arn.rsplit("/", 1)[-1]
        try:
            policies = iam.list_role_policies(RoleName=name)["PolicyNames"]
        except ClientError:
            return False  # no such role: the service cannot assume it
        for policy in policies:
            document = iam.get_role_policy(RoleName=name, PolicyName=policy)["PolicyDocument"]
            if allows(document if isinstance(document, dict) else json.loads(document), permission):
                return True
        return False
