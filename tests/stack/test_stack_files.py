"""The stack's files as a user meets them: formatted, with a complete example tfvars."""

from __future__ import annotations

import subprocess

from stack_spec import STACK_DIR, VARIABLE_DEFAULTS, load_hcl, offline_terraform_env
from tool_support import require_tool


def test_stack_is_terraform_fmt_clean():
    terraform = require_tool("terraform")
    result = subprocess.run(
        [terraform, "fmt", "-check", "-recursive", "-list=true", "-no-color", str(STACK_DIR)],
        env=offline_terraform_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, f"run `terraform fmt -recursive terraform`:\n{result.stdout}"


def test_example_tfvars_sets_every_variable_to_its_default():
    assert load_hcl(STACK_DIR / "terraform.tfvars.example") == VARIABLE_DEFAULTS
