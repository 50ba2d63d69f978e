"""SimInfra: the stack's variables applied to a running world, and the stack's outputs."""

from __future__ import annotations

from collections.abc import Iterator

import hcl2
import pytest
import yaml
from hcl2 import SerializationOptions
from lab_support import ROOT
from sim_support import lab_variables, running_world
from stack_spec import leaf_paths

from labs.aws.stack import STACK_OUTPUTS
from labs.errors import InfraError
from labs.sim.aws.seed import moto_clients
from labs.sim.controlplane.gpu_operator import release
from labs.sim.gpu_operator_release import VALUES_FILE, Helm
from labs.sim.infra import SimInfra
from labs.sim.world import World

OUTPUTS_TF = ROOT / "terraform" / "outputs.tf"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One world for the module: each test leaves the stack's default variables applied."""
    yield from running_world(tmp_path_factory.mktemp("world"))


def ingress_rules(world: World, group_id: str) -> list[dict]:
    ec2 = moto_clients(world.endpoints)("ec2")
    rules = ec2.describe_security_group_rules(Filters=[{"Name": "group-id", "Values": [group_id]}])[
        "SecurityGroupRules"
    ]
    return [r for r in rules if not r["IsEgress"]]


def test_outputs_are_the_stack_outputs_with_world_values(world: World) -> None:
    outputs = SimInfra(world.endpoints).outputs()
    assert set(outputs) == STACK_OUTPUTS
    if OUTPUTS_TF.exists():
        options = SerializationOptions(strip_string_quotes=True, explicit_blocks=False)
        with OUTPUTS_TF.open() as handle:
            blocks = hcl2.load(handle, serialization_options=options)["output"]
        declared = {name for block in blocks for name in block}
        assert set(outputs) == declared
    assert outputs["cluster_endpoint"] == world.endpoints["kube_url"]
    assert outputs["gpu_subnet_az"] == "ap-northeast-2a"
    assert outputs["vpc_id"].startswith("vpc-")
    assert outputs["gpu_node_group_name"] == "myeks-ng-gpu"


def test_plan_then_apply_toggles_rules_and_operator_idempotently(world: World) -> None:
    infra = SimInfra(world.endpoints)
    outputs = infra.outputs()
    assert infra.plan(lab_variables()) == []
    blocked = lab_variables(
        enable_gpu_operator=True,
        enable_aux_sg_vpc_allow=False,
        node_sg_enable_recommended_rules=False,
    )
    plan = infra.plan(blocked)
    assert plan[0] == "+ helm_release.gpu_operator[0] (create)"
    assert "- aws_vpc_security_group_ingress_rule.node_aux_from_vpc[0] (destroy)" in plan
    assert '- module.eks.aws_security_group_rule.node["ingress_nodes_ephemeral"] (destroy)' in plan
    infra.apply(blocked)
    assert infra.plan(blocked) == []
    assert ingress_rules(world, outputs["auxiliary_node_sg_id"]) == []
    node_ports = {
        (r["FromPort"], r["ToPort"])
        for r in ingress_rules(world, outputs["node_security_group_id"])
    }
    assert (1025, 65535) not in node_ports and (443, 443) in node_ports

    infra.apply(lab_variables())
    assert infra.plan(lab_variables()) == []
    assert len(ingress_rules(world, outputs["auxiliary_node_sg_id"])) == 1


def test_variables_the_world_cannot_honour_are_refused_by_name(world: World) -> None:
    infra = SimInfra(world.endpoints)
    with pytest.raises(InfraError, match="gpu_instance_type='p4d.24xlarge'"):
        infra.plan(lab_variables(gpu_instance_type="p4d.24xlarge"))
    with pytest.raises(InfraError, match="gpu_desired_size"):
        infra.apply(lab_variables(gpu_desired_size=3))
    with pytest.raises(InfraError, match="variables missing"):
        infra.apply({"ClusterBaseName": "myeks"})


def test_every_key_of_the_lab_values_is_a_key_of_the_rehearsal_chart() -> None:
    """The stack's values file works on the rehearsal's chart too: no key is one that only
    v26.3.1 knows (helm would ignore it silently)."""
    chart = yaml.safe_load((release(print).chart / "values.yaml").read_text())
    lab = yaml.safe_load(VALUES_FILE.read_text())

    def present(path: str) -> bool:
        tree: object = chart
        for key in path.split("."):
            if not isinstance(tree, dict) or key not in tree:
                return False
            tree = tree[key]
        return True

    assert [path for path in leaf_paths(lab) if not present(path)] == []


def test_the_chart_renders_the_cluster_policy_from_the_stack_values() -> None:
    spec = Helm().rendered("ClusterPolicy", "gpu-operator")["spec"]
    assert spec["driver"]["enabled"] is False
    assert spec["toolkit"]["enabled"] is False
    assert spec["devicePlugin"]["enabled"] is True
    assert spec["validator"]["plugin"]["env"] == [{"name": "WITH_WORKLOAD", "value": "true"}]
    # the release's own operand versions, not v26.3.1's
    assert spec["devicePlugin"]["version"] == "v0.17.4"
    assert spec["dcgmExporter"]["serviceMonitor"]["enabled"] is False
