"""The GPU time limit on the AWS side: one EventBridge Scheduler schedule per lab.

A one-time `at(...)` schedule (UTC) calls UpdateNodegroupConfig through the scheduler's
universal target for the EKS API and sets the GPU node group to min 0 / max as the
group's / desired 0, then deletes itself (ActionAfterCompletion DELETE). It runs in AWS
whatever happens to the laptop that created it. Moving the limit updates the same
schedule; scaling to 0 deletes it, so it cannot cut a later session short.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from botocore.exceptions import ClientError

from labs.aws.cloud import CloudError

# The scheduler's universal target for EKS UpdateNodegroupConfig.
EKS_SCALE_TARGET = "arn:aws:scheduler:::aws-sdk:eks:updateNodegroupConfig"
AT_EXPRESSION = re.compile(r"at\((\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\)")
_NEEDED = "scheduler:CreateSchedule, UpdateSchedule, DeleteSchedule, GetSchedule and iam:PassRole"


def at_expression(moment: datetime) -> str:
    """`at(yyyy-mm-ddThh:mm:ss)` of an aware datetime, in UTC (the schedule's timezone)."""
    return f"at({moment.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%S')})"


def due_at(schedule: dict[str, Any]) -> datetime | None:
    """When a one-time schedule fires, as an aware datetime; None for rate/cron schedules."""
    match = AT_EXPRESSION.fullmatch(schedule["ScheduleExpression"])
    if match is None:
        return None
    zone = ZoneInfo(schedule.get("ScheduleExpressionTimezone") or "UTC")
    return datetime.fromisoformat(match.group(1)).replace(tzinfo=zone)


def put_gpu_time_limit(
    scheduler: Any,
    *,
    name: str,
    group: str,
    at: datetime,
    cluster: str,
    nodegroup: str,
    max_size: int,
    role_arn: str,
) -> bool:
    """Create the schedule, or move it to `at` if it exists; True when it was created.

    UpdateSchedule resets every field it is not given, so both calls carry the full request.
    """
    scaling = {"minSize": 0, "maxSize": max_size, "desiredSize": 0}
    request = {
        "Name": name,
        "GroupName": group,
        "Description": f"eks-gpu-lab: GPU time limit, scales {nodegroup} to 0",
        "ScheduleExpression": at_expression(at),
        "ScheduleExpressionTimezone": "UTC",
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "ActionAfterCompletion": "DELETE",
        "State": "ENABLED",
        "Target": {
            "Arn": EKS_SCALE_TARGET,
            "RoleArn": role_arn,
            "Input": json.dumps(
                {"clusterName": cluster, "nodegroupName": nodegroup, "scalingConfig": scaling}
            ),
        },
    }
    try:
        scheduler.create_schedule(**request)
        return True
    except ClientError as error:
        if _code(error) != "ConflictException":
            raise _schedule_error(error, name, role_arn) from None
    try:
        scheduler.update_schedule(**request)
    except ClientError as error:
        raise _schedule_error(error, name, role_arn) from None
    return False


def read_gpu_time_limit(scheduler: Any, name: str, group: str) -> datetime | None:
    """When the lab's schedule fires, or None when there is none (never set, deleted, or it
    has fired)."""
    try:
        schedule = scheduler.get_schedule(Name=name, GroupName=group)
    except ClientError as error:
        if _code(error) == "ResourceNotFoundException":
            return None
        raise _schedule_error(error, name, None) from None
    at = due_at(schedule)
    if at is None:
        raise CloudError(
            f"schedule {name} is not a one-time at(...) schedule "
            f"({schedule['ScheduleExpression']}); delete it and run `invoke lab.extend`"
        )
    return at


def delete_gpu_time_limit(scheduler: Any, name: str, group: str) -> bool:
    """Remove the schedule; True when there was one."""
    try:
        scheduler.delete_schedule(Name=name, GroupName=group)
    except ClientError as error:
        if _code(error) == "ResourceNotFoundException":
            return False
        raise _schedule_error(error, name, None) from None
    return True


def _schedule_error(error: ClientError, name: str, role_arn: str | None) -> CloudError:
    code, message = _code(error), error.response.get("Error", {}).get("Message", str(error))
    needs = f"{_NEEDED} on {role_arn}" if role_arn else _NEEDED
    return CloudError(
        f"EventBridge Scheduler refused schedule {name} ({code}: {message}); the lab's "
        f"credentials need {needs}"
    )


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", "Unknown"))
