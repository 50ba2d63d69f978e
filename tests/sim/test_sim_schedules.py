"""The rehearsal's EventBridge Scheduler, against moto in process: a one-time schedule fires
when the world's clock reaches it, as far as its role allows, and deletes itself."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from moto import mock_aws

from labs.aws import stack
from labs.aws.schedules import put_gpu_time_limit
from labs.sim.controllers.schedules import EventBridgeScheduler
from labs.sim.timings import WorldClock, scaled

REGION = "ap-northeast-2"
CLUSTER = "myeks"
GROUP = stack.gpu_node_group_name(CLUSTER)
SPEED = 60.0
TRUST = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "scheduler.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
)


@pytest.fixture
def clients(monkeypatch) -> Iterator:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():

        def client(service: str):
            return boto3.client(service, region_name=REGION)

        eks = client("eks")
        eks.create_cluster(name=CLUSTER, roleArn="arn:aws:iam::123456789012:role/c",
                           resourcesVpcConfig={})  # fmt: skip
        eks.create_nodegroup(
            clusterName=CLUSTER, nodegroupName=GROUP, nodeRole="arn:aws:iam::123456789012:role/n",
            subnets=["subnet-1"], scalingConfig={"minSize": 0, "maxSize": 2, "desiredSize": 2},
        )  # fmt: skip
        yield client


def role(clients, name: str, policy: str) -> str:
    iam = clients("iam")
    arn = iam.create_role(RoleName=name, AssumeRolePolicyDocument=TRUST)["Role"]["Arn"]
    iam.put_role_policy(RoleName=name, PolicyName="p", PolicyDocument=policy)
    return arn


def the_stacks_role(clients) -> str:
    group = clients("eks").describe_nodegroup(clusterName=CLUSTER, nodegroupName=GROUP)
    arn = group["nodegroup"]["nodegroupArn"]
    return role(clients, "ttl", stack.render_policy(stack.GPU_TTL_POLICY, nodegroup_arn=arn))


def time_limit(clients, role_arn: str, at: datetime) -> None:
    """The schedule as the tool sets it (lab.up / lab.scale)."""
    put_gpu_time_limit(
        clients("scheduler"), name="myeks-gpu-ttl", group="default", at=at, cluster=CLUSTER,
        nodegroup=GROUP, max_size=2, role_arn=role_arn,
    )  # fmt: skip


def controller(clients, clock: WorldClock) -> EventBridgeScheduler:
    """The controller alone: it reads and writes moto only, never the Kubernetes API."""
    return EventBridgeScheduler(None, scaled(SPEED), clients, clock)


def scaling(clients) -> dict:
    group = clients("eks").describe_nodegroup(clusterName=CLUSTER, nodegroupName=GROUP)
    return group["nodegroup"]["scalingConfig"]


def schedules(clients) -> list[str]:
    return [s["Name"] for s in clients("scheduler").list_schedules()["Schedules"]]


# The lab's default limit: 4 world-hours, 4 wall minutes at 60x, so a loaded machine's
# slow moto calls never reach it before the test looks.
LIMIT = timedelta(hours=4)


# A world that started five minutes ago at 60x is 295 world-minutes ahead of the wall clock:
# past the limit.
def world_started_five_minutes_ago() -> WorldClock:
    return WorldClock(SPEED, start=datetime.now(UTC) - timedelta(minutes=5))


def test_a_schedule_fires_when_the_worlds_clock_reaches_it_then_deletes_itself(clients):
    fresh = WorldClock(SPEED)
    time_limit(clients, the_stacks_role(clients), fresh.now() + LIMIT)

    wait = controller(clients, fresh).reconcile()
    assert scaling(clients)["desiredSize"] == 2 and schedules(clients) == ["myeks-gpu-ttl"]
    assert wait is not None and 0 < wait <= LIMIT.total_seconds() / SPEED

    controller(clients, world_started_five_minutes_ago()).reconcile()
    assert scaling(clients) == {"minSize": 0, "maxSize": 2, "desiredSize": 0}
    assert schedules(clients) == [], "ActionAfterCompletion DELETE"


def test_a_role_that_may_not_update_the_node_group_scales_nothing(clients):
    read_only = json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "eks:Describe*", "Resource": "*"}],
        }
    )
    time_limit(clients, role(clients, "reader", read_only), datetime.now(UTC))

    controller(clients, world_started_five_minutes_ago()).reconcile()

    assert scaling(clients)["desiredSize"] == 2
    assert schedules(clients) == ["myeks-gpu-ttl"], "a failed invocation does not complete it"
