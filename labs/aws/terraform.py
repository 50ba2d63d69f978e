"""The lab's infrastructure through Terraform: a thin adapter over python-terraform.

Each lab gets its own Terraform root in its state directory: the stack's files are
mirrored into `working_dir` before every command, and Terraform's own files (the
`.terraform` directory, lock file, state, the lab's variables) live beside them. So
several labs coexist without workspaces or legacy `-state` flags, every lab keeps the
configuration it was applied with, and a learner can `cd` there and run `terraform
state list` or `terraform plan` by hand with the lab's variables (kept in
`terraform.tfvars.json`, which Terraform loads by itself).

A stack may read files that live beside its directory rather than in it (the lab's alert
rules: `${path.module}/../monitoring/gpu-alerts.yaml`, so the checkout keeps ONE rules file);
those `companions` are placed the same way beside the working dir, in the lab's own directory.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from python_terraform import IsFlagged, IsNotFlagged, Terraform

from labs.errors import InfraError
from labs.state import atomic_write_json

VARIABLES_FILE = "terraform.tfvars.json"
STATE_FILE = "terraform.tfstate"
_PLAN_FILE = "lab.tfplan"
_PENDING_VARIABLES_FILE = "pending.tfvars.json"
# Terraform's and this adapter's own files: never copied from the stack, never removed.
_WORKING_FILES = (
    ".terraform",
    ".terraform.lock.hcl",
    "terraform.tfstate",
    "terraform.tfstate.backup",
    ".terraform.tfstate.lock.info",
    "*.tfvars",
    "*.tfvars.json",
    "*.tfplan",
)
_WRAPPED_COMMANDS = frozenset({"init", "plan", "apply", "destroy"})
_ERROR_TAIL_LINES = 40
_ACCESS_KEY_ID = re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b")
_ACTION_LABELS = {
    ("create",): "+ create",
    ("delete",): "- destroy",
    ("update",): "~ update",
    ("delete", "create"): "-/+ replace",
    ("create", "delete"): "+/- replace",
    ("forget",): ". forget",
}


class TerraformInfra:
    """The `Infra` of an AWS lab: runs the real `terraform` binary in the lab's own root."""

    def __init__(
        self,
        working_dir: Path,
        stack_dir: Path,
        *,
        terraform_bin: str = "terraform",
        stream_output: bool = False,
        companions: Mapping[str, Path] | None = None,
    ) -> None:
        """`stream_output=True` shows Terraform's progress live (a real apply takes
        15-20 minutes); error messages then point at that output instead of quoting it.
        `companions`: files the stack reads from beside its directory, by their path relative
        to the stack's parent (`monitoring/gpu-alerts.yaml`), each copied to that path
        relative to the working dir's parent before every command."""
        self.working_dir = Path(working_dir).resolve()
        self.stack_dir = Path(stack_dir).resolve()
        self.companions = dict(companions or {})
        self._terraform_bin = terraform_bin
        self._stream_output = stream_output
        self._initialised = False

    def init(self) -> None:
        """Mirror the stack into the working dir and run `terraform init` (once per object)."""
        self.sync_stack()
        if self._initialised:
            return
        self._run("init", reconfigure=IsNotFlagged, var=None)
        self._initialised = True

    def apply(self, variables: Mapping[str, Any]) -> dict[str, Any]:
        """Apply with exactly `variables`; remember them for later plans by hand and destroy."""
        self.init()
        pending = self.working_dir / _PENDING_VARIABLES_FILE
        atomic_write_json(pending, dict(variables))
        state_before = self._state_bytes()
        try:
            self._run("apply", skip_plan=True, var=None, var_file=pending.name)
        except InfraError:
            if self._state_bytes() != state_before:
                # A half-finished apply still created things: destroy needs these variables.
                pending.replace(self.working_dir / VARIABLES_FILE)
            raise
        else:
            pending.replace(self.working_dir / VARIABLES_FILE)
        finally:
            pending.unlink(missing_ok=True)
        return self.outputs()

    def plan(self, variables: Mapping[str, Any]) -> list[str]:
        """One line per change `apply(variables)` would make, e.g. `~ update x.y (input)`."""
        self.init()
        plan_variables = self.working_dir / _PENDING_VARIABLES_FILE
        plan_file = self.working_dir / _PLAN_FILE
        atomic_write_json(plan_variables, dict(variables))
        try:
            exit_code, _ = self._run(
                "plan", var=None, var_file=plan_variables.name, out=_PLAN_FILE, ok_codes=(0, 2)
            )
            if exit_code == 0:
                return []
            _, shown = self._run("show", _PLAN_FILE, json=IsFlagged, capture=True)
            return describe_plan(json.loads(shown or "{}"))
        finally:
            plan_variables.unlink(missing_ok=True)
            plan_file.unlink(missing_ok=True)

    def outputs(self) -> dict[str, Any]:
        """Output values of the last apply, as plain values; {} before the first apply."""
        if not (self.working_dir / STATE_FILE).exists():
            return {}
        _, text = self._run("output", json=IsFlagged, capture=True)
        return {name: entry["value"] for name, entry in json.loads(text or "{}").items()}

    def destroy(self) -> None:
        """Destroy everything in the lab's state with the variables it was applied with."""
        if not self._has_resources():
            return
        self.init()
        self._run("destroy", force=IsNotFlagged, auto_approve=IsFlagged, var=None)

    def sync_stack(self) -> None:
        """Make the working dir's configuration an exact copy of the stack's, and place the
        stack's companions beside it as they lie beside the stack."""
        if not self.stack_dir.is_dir():
            raise InfraError(
                f"Terraform stack directory {self.stack_dir} does not exist; "
                "run from a checkout of eks-gpu-lab or pass the stack's path"
            )
        self.working_dir.mkdir(parents=True, exist_ok=True)
        for entry in self.working_dir.iterdir():
            if not _is_working_file(entry.name):
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        shutil.copytree(
            self.stack_dir,
            self.working_dir,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns(*_WORKING_FILES),
        )
        for relative, source in self.companions.items():
            if not Path(source).is_file():
                raise InfraError(
                    f"{source} is missing: the stack reads it as ../{relative}; "
                    "run from a checkout of eks-gpu-lab"
                )
            target = self.working_dir.parent / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)

    def _terraform(self) -> Terraform:
        if shutil.which(self._terraform_bin) is None:
            raise InfraError(
                f"'{self._terraform_bin}' was not found on PATH. Install Terraform >= 1.5.7 "
                "(https://developer.hashicorp.com/terraform/install) and check that "
                "`terraform version` works, or rehearse the lab locally without AWS"
            )
        return Terraform(working_dir=str(self.working_dir), terraform_bin_path=self._terraform_bin)

    def _run(
        self,
        command: str,
        *args: str,
        ok_codes: tuple[int, ...] = (0,),
        capture: bool = False,
        **options: Any,
    ) -> tuple[int, str | None]:
        """Run one Terraform command (streamed unless `capture`); return its code and stdout.

        Raises InfraError with Terraform's error text when the exit code is not ok.
        """
        terraform = self._terraform()
        if self._stream_output and not capture:
            options["capture_output"] = False
        # python-terraform's own methods add its defaults (-no-color, -input=false, ...).
        run = getattr(terraform, command) if command in _WRAPPED_COMMANDS else terraform.cmd
        args = args if command in _WRAPPED_COMMANDS else (command, *args)
        with _quiet_python_terraform():
            exit_code, stdout, stderr = run(*args, **options)
        if exit_code not in ok_codes:
            raise InfraError(f"terraform {command} failed (exit {exit_code}): {_why(stderr)}")
        return exit_code, stdout

    def _state_bytes(self) -> bytes | None:
        try:
            return (self.working_dir / STATE_FILE).read_bytes()
        except FileNotFoundError:
            return None

    def _has_resources(self) -> bool:
        state_bytes = self._state_bytes()
        return bool(state_bytes and json.loads(state_bytes).get("resources"))


def describe_plan(plan: Mapping[str, Any]) -> list[str]:
    """Human-readable change lines from `terraform show -json` of a saved plan."""
    lines = []
    for change in plan.get("resource_changes", []):
        actions = tuple(change["change"]["actions"])
        if actions in {("no-op",), ("read",)}:
            continue
        label = _ACTION_LABELS.get(actions, "/".join(actions))
        line = f"{label} {change['address']}"
        if actions == ("update",):
            line += f" ({', '.join(_changed_attributes(change['change']))})"
        lines.append(line)
    for name, change in sorted(plan.get("output_changes", {}).items()):
        actions = tuple(change["actions"])
        if actions != ("no-op",):
            lines.append(f"{_ACTION_LABELS.get(actions, '/'.join(actions))} output {name}")
    return lines


def _changed_attributes(change: Mapping[str, Any]) -> list[str]:
    before = change.get("before") or {}
    after = change.get("after") or {}
    unknown = change.get("after_unknown") or {}
    keys = set(before) | set(after) | set(unknown)
    return sorted(
        key for key in keys if before.get(key) != after.get(key) or _has_unknown(unknown.get(key))
    )


def _has_unknown(marker: Any) -> bool:
    """`after_unknown` mirrors the value's shape with booleans; True marks unknown."""
    if isinstance(marker, dict):
        return any(_has_unknown(value) for value in marker.values())
    if isinstance(marker, list):
        return any(_has_unknown(value) for value in marker)
    return marker is True


def error_tail(stderr: str) -> str:
    """Terraform's error text from the first `Error:` on (or the last lines), keys redacted."""
    lines = stderr.strip().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Error:")), None)
    lines = lines[start:] if start is not None else lines
    text = "\n".join(lines[-_ERROR_TAIL_LINES:]).strip()
    return _ACCESS_KEY_ID.sub("<access key id>", text)


def _is_working_file(name: str) -> bool:
    return any(Path(name).match(pattern) for pattern in _WORKING_FILES)


def _why(stderr: str | None) -> str:
    if stderr is None:
        return "see Terraform's output above"
    return error_tail(stderr) or "Terraform printed no error message"


@contextmanager
def _quiet_python_terraform() -> Iterator[None]:
    """python-terraform 0.10.1 logs Terraform's stderr through the deprecated `Logger.warn`.

    That text already goes into InfraError, so it is kept out of the application's logs
    (which could otherwise repeat a provider's error text) and out of warnings.
    """
    logger = logging.getLogger("python_terraform")
    propagate = logger.propagate
    logger.propagate = False
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", message="The 'warn' method is deprecated", category=DeprecationWarning
            )
            yield
    finally:
        logger.propagate = propagate
