"""Bad input and wrong targets: a clear message, a non-zero exit, and nothing changed."""

from __future__ import annotations

from pathlib import Path

import pytest
from lab_support import invoke_env, run_invoke
from moto.server import ThreadedMotoServer
from tool_support import require_tool, require_venv_tool

from labs.lab import Lab
from labs.settings import load_settings


def _nothing_created(state_dir: Path, lab: str) -> bool:
    return not (state_dir / lab / "state.json").exists()


@pytest.mark.parametrize(
    ("gpus", "message"),
    [("3", "exceeds the GPU node group's max size 2"), ("-1", "is negative")],
)
def test_lab_up_rejects_a_bad_gpu_count_before_doing_anything(tmp_path, gpus, message):
    env = invoke_env(tmp_path)
    result = run_invoke("lab.up", "--sim", "--lab", "bad", "--gpus", gpus, env=env)
    assert result.returncode == 1
    assert message in result.stderr and "--gpus" in result.stderr
    assert not (tmp_path / "bad").exists()


def test_unknown_setting_in_the_environment_is_named(tmp_path):
    env = invoke_env(tmp_path, INVOKE_LAB_REGION="Seoul")
    result = run_invoke("lab.up", "--sim", "--lab", "bad", env=env)
    assert result.returncode == 1
    assert "'Seoul' is not an AWS region name" in result.stderr


def test_lab_status_of_an_unknown_lab_says_how_to_create_it(tmp_path):
    result = run_invoke("lab.status", "--lab", "nope", env=invoke_env(tmp_path))
    assert result.returncode == 1
    assert "no lab named 'nope'" in result.stderr and "invoke lab.up --lab nope" in result.stderr


@pytest.fixture
def moto_server():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def test_aws_lab_up_without_terraform_on_path_stops_at_preflight(tmp_path, moto_server):
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "kubectl").symlink_to(require_tool("kubectl"))
    (tools / "aws").symlink_to(require_venv_tool("aws"))
    env = invoke_env(
        tmp_path / "labs", PATH=str(tools), AWS_ENDPOINT_URL=moto_server,
        AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
    )  # fmt: skip
    result = run_invoke("lab.up", "--lab", "noterraform", env=env)
    assert result.returncode == 1
    assert "terraform not found on PATH" in result.stdout
    assert "preflight found problems" in result.stderr
    assert _nothing_created(tmp_path / "labs", "noterraform")


def test_aws_lab_up_without_credentials_says_how_to_provide_them(tmp_path):
    env = invoke_env(
        tmp_path, AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"), AWS_EC2_METADATA_DISABLED="true",
    )  # fmt: skip
    result = run_invoke("lab.up", "--lab", "nocreds", env=env)
    assert result.returncode == 1
    assert "no AWS credentials found" in result.stderr
    assert "Traceback" not in result.stderr
    assert _nothing_created(tmp_path, "nocreds")


def _aws_lab_record(state_dir: Path, lab: str) -> Path:
    """An AWS lab as lab.up leaves it, written the way the tool writes it."""
    settings = load_settings(None, {"lab": lab, "state_dir": str(state_dir)})
    record = Lab.create(settings, "aws")
    record.update(account_id="123456789012", outputs={"cluster_name": lab})
    return settings.paths.state_file


def test_lab_scale_on_an_aws_lab_without_credentials_is_a_clear_error(tmp_path):
    state_file = _aws_lab_record(tmp_path, "awsnocreds")
    env = invoke_env(
        tmp_path, AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"), AWS_EC2_METADATA_DISABLED="true",
    )  # fmt: skip
    before = state_file.read_text()
    result = run_invoke("lab.scale", "1", "--lab", "awsnocreds", env=env)
    assert result.returncode == 1
    assert "no AWS credentials found" in result.stderr and "Traceback" not in result.stderr
    assert state_file.read_text() == before


def test_demo_refuses_to_touch_an_existing_lab(tmp_path):
    state_file = _aws_lab_record(tmp_path, "prod")
    before = state_file.read_text()
    result = run_invoke("demo", "--lab", "prod", env=invoke_env(tmp_path))
    assert result.returncode == 1
    assert "lab 'prod' already exists" in result.stderr
    assert state_file.read_text() == before
