"""The boto3 layer against moto (in process and as a server on loopback), and cost estimates.

Calls AWS answers in ways moto cannot (an update already in progress, a refused
parameter, a known quota) are played with botocore's own Stubber.
"""

from __future__ import annotations

import stat
from collections.abc import Iterator

import boto3
import pytest
from botocore.stub import ANY, Stubber
from moto import mock_aws
from moto.server import ThreadedMotoServer

from labs.aws import cloud, pricing
from labs.aws.cloud import CloudError, NodegroupNotFound, aws_session

REGION = "ap-northeast-2"
CLUSTER = "myeks"
GPU_GROUP = "myeks-ng-gpu"
ROLE = "arn:aws:iam::123456789012:role/lab"
MOTO_ACCOUNT = "123456789012"


@pytest.fixture(autouse=True)
def fake_credentials(monkeypatch, tmp_path):
    """Credentials moto accepts, and no way to find real ones."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def aws() -> Iterator[cloud.AwsSession]:
    with mock_aws():
        yield aws_session(REGION)


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def create_gpu_nodegroup(eks, cluster: str = CLUSTER, max_size: int = 2) -> None:
    """The stack's GPU node group: desired 0 / min 0 / max 2 (always an explicit scalingConfig)."""
    eks.create_cluster(name=cluster, roleArn=ROLE, resourcesVpcConfig={})
    eks.create_nodegroup(
        clusterName=cluster,
        nodegroupName=f"{cluster}-ng-gpu",
        nodeRole=ROLE,
        subnets=["subnet-gpu"],
        scalingConfig={"minSize": 0, "maxSize": max_size, "desiredSize": 0},
        instanceTypes=["g5.xlarge"],
    )


def record_calls(client) -> list[str]:
    """Names of the API operations `client` sends from now on."""
    calls: list[str] = []
    client.meta.events.register(
        "before-call.*.*", lambda model, **_: calls.append(model.name), unique_id="record"
    )
    return calls


def nodegroup_description(status: str = "ACTIVE", desired: int = 0, issues=()) -> dict:
    return {
        "nodegroup": {
            "nodegroupName": GPU_GROUP,
            "status": status,
            "scalingConfig": {"minSize": 0, "maxSize": 2, "desiredSize": desired},
            "instanceTypes": ["g5.xlarge"],
            "health": {"issues": list(issues)},
        }
    }


def offline_eks():
    """A real EKS client that never reaches a network, for use with a Stubber."""
    return aws_session(REGION, endpoint_url="http://127.0.0.1:9").client("eks")


# Sessions and clients


def test_clients_point_at_the_endpoint_with_adaptive_retries_and_are_reused():
    aws = aws_session(REGION, endpoint_url="http://127.0.0.1:5999")
    eks = aws.client("eks")

    assert eks.meta.endpoint_url == "http://127.0.0.1:5999"
    assert eks.meta.region_name == REGION
    # botocore counts max_attempts 10 as 10 retries after the first try.
    assert eks.meta.config.retries == {"mode": "adaptive", "total_max_attempts": 11}
    assert aws.client("eks") is eks


def test_unknown_credential_keys_and_profiles_are_refused_clearly():
    with pytest.raises(CloudError, match="unknown credential keys"):
        aws_session(REGION, credentials={"access_key": "x"})
    with pytest.raises(CloudError, match="aws configure list-profiles"):
        aws_session(REGION, credentials={"profile_name": "no-such-profile"})


def test_missing_credentials_say_how_to_provide_them(monkeypatch, moto_endpoint):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    aws = aws_session(REGION, endpoint_url=moto_endpoint)

    with pytest.raises(CloudError, match="no AWS credentials found; run `aws configure`"):
        cloud.caller_identity(aws)
    with pytest.raises(CloudError, match="set AWS_PROFILE"):
        cloud.preflight(aws, instance_type="g5.xlarge", gpu_max=2)


def test_rejected_credentials_are_told_apart_from_missing_ones():
    aws = aws_session(REGION, endpoint_url="http://127.0.0.1:9")
    with Stubber(aws.client("sts")) as sts:
        sts.add_client_error(
            "get_caller_identity", "ExpiredToken", "The security token included has expired"
        )
        with pytest.raises(CloudError, match=r"rejected the credentials \(ExpiredToken"):
            cloud.caller_identity(aws)


# Preflight and quotas


@pytest.fixture
def only_kubectl_on_path(monkeypatch, tmp_path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    kubectl = bin_dir / "kubectl"
    kubectl.write_text("#!/bin/sh\n")
    kubectl.chmod(kubectl.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(bin_dir))


def test_preflight_reports_identity_tools_and_an_unknown_quota_under_moto(
    aws, only_kubectl_on_path
):
    report = cloud.preflight(aws, instance_type="g5.xlarge", gpu_max=2)

    assert report.account_id == MOTO_ACCOUNT
    assert report.region == REGION
    assert report.tools["kubectl"] is not None
    assert report.tools["terraform"] is None
    assert report.quota_vcpus is None
    assert report.max_gpus_by_quota is None
    assert "L-DB2E81BA" in report.quota_note and "unknown" in report.quota_note
    assert report.problems == (
        "terraform not found on PATH; install it (https://developer.hashicorp.com/terraform/install)",
    )
    assert not report.ok
    assert any(line.startswith("PROBLEM") for line in report.lines())


def test_preflight_passes_when_tools_exist_and_the_quota_is_unknown(aws):
    report = cloud.preflight(aws, instance_type="g5.xlarge", gpu_max=2, tools=["sh"])

    assert report.ok
    assert f"account   {MOTO_ACCOUNT}" in report.lines()[0]


def quota_stubber(aws) -> Stubber:
    return Stubber(aws.client("service-quotas", max_attempts=cloud.ADVISORY_ATTEMPTS))


def test_a_quota_too_small_for_gpu_max_is_a_problem_with_the_fix(aws):
    with quota_stubber(aws) as quotas:
        quotas.add_response(
            "get_service_quota",
            {"Quota": {"Value": 4.0}},
            {"ServiceCode": "ec2", "QuotaCode": "L-DB2E81BA"},
        )
        report = cloud.preflight(aws, instance_type="g5.xlarge", gpu_max=2, tools=[])

    assert report.quota_vcpus == 4.0
    assert report.max_gpus_by_quota == 1
    [problem] = report.problems
    assert "gpu_max 2 x g5.xlarge needs 8 vCPUs" in problem
    assert "lower gpu_max to 1 (INVOKE_LAB_GPU_MAX" in problem


def test_an_unchanged_quota_falls_back_to_the_aws_default(aws):
    with quota_stubber(aws) as quotas:
        quotas.add_client_error("get_service_quota", "NoSuchResourceException", "not applied")
        quotas.add_response("get_aws_default_service_quota", {"Quota": {"Value": 8.0}})
        report = cloud.preflight(aws, instance_type="g5.xlarge", gpu_max=2, tools=[])

    assert report.max_gpus_by_quota == 2
    assert report.ok


def test_p_instances_use_their_own_quota_and_other_families_have_none(aws):
    with quota_stubber(aws) as quotas:
        quotas.add_response(
            "get_service_quota",
            {"Quota": {"Value": 8.0}},
            {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"},
        )
        assert cloud.gpu_vcpu_quota(aws, "p3.2xlarge")[0] == 8.0
    assert cloud.gpu_vcpu_quota(aws, "t3.medium") == (
        None,
        "no GPU quota known for the t3.medium family",
    )


@pytest.mark.parametrize(
    ("vcpus", "instance_type", "nodes"),
    [(8, "g5.xlarge", 2), (4, "g5.xlarge", 1), (0, "g5.xlarge", 0), (16, "g5.2xlarge", 2)],
)
def test_max_gpus_for_quota_counts_whole_nodes(vcpus, instance_type, nodes):
    assert cloud.max_gpus_for_quota(vcpus, instance_type) == nodes


def test_max_gpus_for_an_unknown_type_lists_the_known_ones():
    with pytest.raises(CloudError, match="no vCPU count on file for x9.huge; known types: g4dn"):
        cloud.max_gpus_for_quota(8, "x9.huge")


# Scaling the GPU node group


def test_scaling_sets_min_zero_max_and_desired_through_the_eks_api(aws):
    eks = aws.client("eks")
    create_gpu_nodegroup(eks)

    update = cloud.scale_gpu_nodegroup(eks, CLUSTER, GPU_GROUP, desired=2, max_size=2)

    assert update, "the id of the update EKS started, to follow"
    group = cloud.describe_gpu_nodegroup(eks, CLUSTER, GPU_GROUP)
    assert (group["min_size"], group["max_size"], group["desired_size"]) == (0, 2, 2)
    assert group["status"] == "ACTIVE"
    assert group["instance_types"] == ["g5.xlarge"]


def test_scaling_again_to_the_same_size_makes_no_update(aws):
    eks = aws.client("eks")
    create_gpu_nodegroup(eks)
    cloud.scale_gpu_nodegroup(eks, CLUSTER, GPU_GROUP, desired=2, max_size=2)
    modified = eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName=GPU_GROUP)["nodegroup"][
        "modifiedAt"
    ]
    calls = record_calls(eks)

    assert cloud.scale_gpu_nodegroup(eks, CLUSTER, GPU_GROUP, desired=2, max_size=2) is None

    assert "UpdateNodegroupConfig" not in calls
    after = eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName=GPU_GROUP)["nodegroup"]
    assert after["modifiedAt"] == modified


def test_scaling_back_to_zero_ends_the_gpu_session(aws):
    eks = aws.client("eks")
    create_gpu_nodegroup(eks)
    cloud.scale_gpu_nodegroup(eks, CLUSTER, GPU_GROUP, desired=2, max_size=2)

    assert cloud.scale_gpu_nodegroup(eks, CLUSTER, GPU_GROUP, desired=0, max_size=2)
    assert cloud.describe_gpu_nodegroup(eks, CLUSTER, GPU_GROUP)["desired_size"] == 0


@pytest.mark.parametrize(
    ("desired", "max_size", "complaint"),
    [
        (3, 2, "cannot scale myeks-ng-gpu to 3 nodes: use 0 to its max size 2"),
        (-1, 2, "cannot scale myeks-ng-gpu to -1 nodes"),
        (1, 0, "max_size 0 for myeks-ng-gpu must be at least 1"),
        (True, 2, "desired for myeks-ng-gpu must be a whole number"),
    ],
)
def test_impossible_sizes_are_refused_before_calling_aws(aws, desired, max_size, complaint):
    eks = aws.client("eks")
    create_gpu_nodegroup(eks)
    calls = record_calls(eks)

    with pytest.raises(CloudError, match=complaint):
        cloud.scale_gpu_nodegroup(eks, CLUSTER, GPU_GROUP, desired=desired, max_size=max_size)

    assert calls == []
    assert cloud.describe_gpu_nodegroup(eks, CLUSTER, GPU_GROUP)["desired_size"] == 0


def test_a_missing_node_group_says_the_lab_is_not_up(aws):
    eks = aws.client("eks")
    eks.create_cluster(name=CLUSTER, roleArn=ROLE, resourcesVpcConfig={})

    with pytest.raises(NodegroupNotFound, match=r"not found .*invoke lab\.up"):
        cloud.scale_gpu_nodegroup(eks, CLUSTER, GPU_GROUP, desired=1, max_size=2)


def expect_update(stubber: Stubber, desired: int) -> None:
    stubber.add_response(
        "update_nodegroup_config",
        {"update": {"id": "u-1", "status": "InProgress"}},
        {
            "clusterName": CLUSTER,
            "nodegroupName": GPU_GROUP,
            "scalingConfig": {"minSize": 0, "maxSize": 2, "desiredSize": desired},
            "clientRequestToken": ANY,
        },
    )


def test_an_update_in_progress_is_waited_out_then_retried():
    eks = offline_eks()
    with Stubber(eks) as stubber:
        stubber.add_response("describe_nodegroup", nodegroup_description(desired=0))
        stubber.add_client_error(
            "update_nodegroup_config", "ResourceInUseException", "update in progress", 409
        )
        stubber.add_response("describe_nodegroup", nodegroup_description("UPDATING"))
        stubber.add_response("describe_nodegroup", nodegroup_description("ACTIVE"))
        expect_update(stubber, desired=2)

        update = cloud.scale_gpu_nodegroup(
            eks, CLUSTER, GPU_GROUP, desired=2, max_size=2, poll_interval=0
        )

        stubber.assert_no_pending_responses()
    assert update == "u-1"


def test_a_node_group_that_stays_busy_gives_up_after_bounded_retries():
    eks = offline_eks()
    with Stubber(eks) as stubber:
        stubber.add_response("describe_nodegroup", nodegroup_description(desired=0))
        for _ in range(2):
            stubber.add_client_error("update_nodegroup_config", "ResourceInUseException", "busy")
            stubber.add_response("describe_nodegroup", nodegroup_description("ACTIVE"))

        with pytest.raises(CloudError, match="stayed busy with another update after 2 tries"):
            cloud.scale_gpu_nodegroup(
                eks, CLUSTER, GPU_GROUP, desired=2, max_size=2, in_use_retries=1, poll_interval=0
            )


def test_eks_refusing_the_sizes_is_reported_by_its_error_code():
    eks = offline_eks()
    with Stubber(eks) as stubber:
        stubber.add_response("describe_nodegroup", nodegroup_description(desired=0))
        stubber.add_client_error(
            "update_nodegroup_config",
            "InvalidParameterException",
            "desired capacity 2 cannot be greater than max size 1",
        )

        with pytest.raises(CloudError, match="EKS refused to scale myeks-ng-gpu: desired capac"):
            cloud.scale_gpu_nodegroup(eks, CLUSTER, GPU_GROUP, desired=2, max_size=2)


def described_update(status: str, errors=()) -> dict:
    return {"update": {"id": "u-1", "status": status, "type": "ConfigUpdate",
                       "errors": list(errors)}}  # fmt: skip


EXPECTED_DESCRIBE = {"name": CLUSTER, "updateId": "u-1", "nodegroupName": GPU_GROUP}


def test_an_update_is_followed_until_eks_says_it_succeeded():
    eks = offline_eks()
    seen: list[str] = []
    with Stubber(eks) as stubber:
        stubber.add_response("describe_update", described_update("InProgress"), EXPECTED_DESCRIBE)
        stubber.add_response("describe_update", described_update("Successful"), EXPECTED_DESCRIBE)

        update = cloud.follow_update(
            eks, CLUSTER, GPU_GROUP, "u-1", poll_interval=0,
            on_wait=lambda _elapsed, status: seen.append(status),
        )  # fmt: skip

        stubber.assert_no_pending_responses()
    assert update["status"] == "Successful"
    assert seen == ["InProgress"]


def test_a_failed_update_is_reported_with_eks_own_error():
    eks = offline_eks()
    error = {
        "errorCode": "AsgInstanceLaunchFailures",
        "errorMessage": "Could not launch On-Demand Instances. VcpuLimitExceeded",
        "resourceIds": ["eks-myeks-ng-gpu-asg"],
    }
    with Stubber(eks) as stubber:
        stubber.add_response("describe_update", described_update("Failed", [error]))

        with pytest.raises(CloudError) as raised:
            cloud.follow_update(eks, CLUSTER, GPU_GROUP, "u-1", poll_interval=0)

    message = str(raised.value)
    assert "EKS update u-1 of node group myeks-ng-gpu Failed" in message
    assert "AsgInstanceLaunchFailures: Could not launch On-Demand Instances. VcpuLimitExceeded" in (
        message
    )
    assert "(eks-myeks-ng-gpu-asg)" in message and "aws eks describe-update" in message


def test_following_an_update_gives_up_at_the_deadline():
    eks = offline_eks()
    with Stubber(eks) as stubber:
        stubber.add_response("describe_update", described_update("InProgress"))

        with pytest.raises(CloudError, match="gave up waiting for EKS update u-1 of myeks-ng-gpu"):
            cloud.follow_update(eks, CLUSTER, GPU_GROUP, "u-1", timeout=0, poll_interval=0)


def test_waiting_fails_fast_on_a_degraded_node_group_with_its_health_issue():
    eks = offline_eks()
    issue = {"code": "AsgInstanceLaunchFailures", "message": "InsufficientInstanceCapacity"}
    with Stubber(eks) as stubber:
        stubber.add_response(
            "describe_nodegroup", nodegroup_description("DEGRADED", issues=[issue])
        )

        with pytest.raises(CloudError, match="is DEGRADED: AsgInstanceLaunchFailures: Insuff"):
            cloud.wait_nodegroup_active(eks, CLUSTER, GPU_GROUP, timeout=60, poll_interval=0)


def test_waiting_gives_up_at_the_deadline():
    eks = offline_eks()
    with Stubber(eks) as stubber:
        stubber.add_response("describe_nodegroup", nodegroup_description("UPDATING"))

        with pytest.raises(CloudError, match="gave up waiting for node group myeks-ng-gpu"):
            cloud.wait_nodegroup_active(eks, CLUSTER, GPU_GROUP, timeout=0, poll_interval=0)


def test_gpu_instances_of_the_node_group_are_listed_until_terminated(aws):
    ec2 = aws.client("ec2")

    def launch(nodegroup: str) -> list[str]:
        tags = [
            {"Key": "eks:cluster-name", "Value": CLUSTER},
            {"Key": "eks:nodegroup-name", "Value": nodegroup},
        ]
        reservation = ec2.run_instances(
            ImageId="ami-12c6146b",
            MinCount=2,
            MaxCount=2,
            InstanceType="g5.xlarge",
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
        )
        return sorted(instance["InstanceId"] for instance in reservation["Instances"])

    gpu_instances = launch(GPU_GROUP)
    launch("myeks-ng-1")

    assert cloud.nodegroup_instances(ec2, CLUSTER, GPU_GROUP) == gpu_instances
    ec2.terminate_instances(InstanceIds=gpu_instances)
    assert cloud.nodegroup_instances(ec2, CLUSTER, GPU_GROUP) == []
    cloud.wait_nodegroup_instances_gone(ec2, CLUSTER, GPU_GROUP, timeout=0, poll_interval=0)


# Against a moto server, as the rehearsal backend runs it


def test_a_moto_server_is_driven_through_the_endpoint(moto_endpoint):
    other_process_view = boto3.client(
        "eks",
        region_name=REGION,
        endpoint_url=moto_endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    create_gpu_nodegroup(other_process_view, cluster="served")
    aws = aws_session(REGION, endpoint_url=moto_endpoint)
    eks = aws.client("eks")

    assert cloud.scale_gpu_nodegroup(eks, "served", "served-ng-gpu", desired=1, max_size=2)
    assert cloud.scale_gpu_nodegroup(eks, "served", "served-ng-gpu", desired=1, max_size=2) is None

    seen = other_process_view.describe_nodegroup(
        clusterName="served", nodegroupName="served-ng-gpu"
    )["nodegroup"]["scalingConfig"]
    assert seen == {"minSize": 0, "maxSize": 2, "desiredSize": 1}
    assert cloud.wait_nodegroup_active(eks, "served", "served-ng-gpu", timeout=30)["status"] == (
        "ACTIVE"
    )
    report = cloud.preflight(aws, instance_type="g5.xlarge", gpu_max=2, tools=[])
    assert report.account_id == MOTO_ACCOUNT
    assert report.quota_vcpus is None and "unknown" in report.quota_note


# Cost estimates


def test_cost_estimate_is_itemised_and_gpu_nodes_dominate():
    idle = pricing.estimate_hourly_cost(REGION, gpu_nodes=0, system_nodes=2)
    session = pricing.estimate_hourly_cost(REGION, gpu_nodes=2, system_nodes=2)

    labels = [item.label for item in session.items]
    assert labels == [
        "EKS control plane",
        "NAT gateway",
        "system nodes (t3.medium)",
        "GPU nodes (g5.xlarge)",
        "EBS gp3 node disks (GB)",
    ]
    gpu_line = session.items[3]
    assert gpu_line.quantity == 2
    assert gpu_line.hourly == pytest.approx(2 * pricing.PRICES[REGION]["g5.xlarge"])
    assert session.total_hourly == pytest.approx(sum(item.hourly for item in session.items))
    assert session.total_hourly - idle.total_hourly > 2 * 1.0
    assert idle.total_hourly > 0.1, "the control plane and NAT bill even without GPUs"
    assert any("estimates" in note for note in session.notes)
    assert session.lines()[0] == f"Estimated cost in {REGION} (USD, on-demand):"
    as_dict = session.as_dict()
    assert as_dict["total"] == session.total_hourly
    assert [item["label"] for item in as_dict["items"]] == labels


def test_an_unknown_region_uses_us_east_1_prices_and_says_so():
    estimate = pricing.estimate_hourly_cost("sa-east-1", gpu_nodes=1, system_nodes=2)

    assert estimate.price_region == "us-east-1"
    assert any("no prices on file for sa-east-1" in note for note in estimate.notes)
    assert estimate.items[3].unit_price == pricing.PRICES["us-east-1"]["g5.xlarge"]


def test_an_instance_type_without_a_price_is_left_out_and_named():
    estimate = pricing.estimate_hourly_cost(
        REGION, gpu_nodes=2, system_nodes=2, gpu_instance_type="g6.xlarge"
    )

    assert estimate.items[3].hourly is None
    assert any("no price on file for g6.xlarge" in note for note in estimate.notes)
    assert "price unknown" in "\n".join(estimate.lines())


def test_gpu_node_minutes_cost_follows_the_hourly_price():
    hourly = pricing.PRICES[REGION]["g5.xlarge"]

    assert pricing.gpu_node_minutes_cost(REGION, "g5.xlarge", 60) == pytest.approx(hourly)
    assert pricing.gpu_node_minutes_cost(REGION, "g5.xlarge", 15) == pytest.approx(hourly / 4)
    with pytest.raises(pricing.PricingError, match="no price on file for p5.48xlarge"):
        pricing.gpu_node_minutes_cost(REGION, "p5.48xlarge", 10)
