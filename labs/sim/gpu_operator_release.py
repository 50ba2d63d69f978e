"""The rehearsal's `helm_release.gpu_operator`: NVIDIA's chart installed by the real helm with
the stack's values file, as terraform's helm provider does on EKS.

The chart and the operator are the release `go/gpu-operator` pins (v25.3.4, the newest the Go
module proxy serves; the EKS stack installs v26.3.1): whatever chart version the stack asks
for, the rehearsal installs this one and says so. `helm list`, `helm get values`, `helm
history` and `helm uninstall` work on it by hand (`invoke lab.env` puts helm on PATH).

Chart hooks run programs of NVIDIA's and NFD's images (the CRD upgrade Job's `kubectl`, NFD's
`nfd-master -prune` after a delete), which the rehearsal's nodes cannot run: helm runs here
with `--no-hooks`, and the README says to pass it by hand too.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from labs.aws import stack
from labs.errors import InfraError
from labs.sim.controlplane import build
from labs.sim.controlplane.gpu_operator import release

NAME = "gpu-operator"
ADDRESS = "helm_release.gpu_operator[0]"
VALUES_FILE = stack.STACK_DIR / "gpu_operator_values.yaml"
# The stack's own limit (gpu_operator.tf `timeout = 900`).
TIMEOUT = "900s"
# Set beside the values file, as gpu_operator.tf does.
SERVICE_MONITOR = "dcgmExporter.serviceMonitor.enabled"


@dataclass(frozen=True)
class Installed:
    """A release as `helm list` shows it: where, and whether its last install succeeded."""

    namespace: str
    status: str


class Helm:
    """The real helm against one lab's API server, with a kubeconfig and helm's own homes in a
    private temporary directory per call (nothing of the user's helm set-up is read or
    written)."""

    def __init__(self, kubeconfig: dict | None = None) -> None:
        self._kubeconfig = kubeconfig  # None: commands that need no cluster (template)

    def run(self, *args: str) -> str:
        binary = build.pinned_binary(build.HELM_PROGRAM)
        with tempfile.TemporaryDirectory(prefix="eks-gpu-lab-helm-") as home:
            config = Path(home) / "kubeconfig"
            config.touch(0o600)
            config.write_text(yaml.safe_dump(self._kubeconfig or {}))
            env = {
                **os.environ,
                "KUBECONFIG": str(config),
                "HELM_CACHE_HOME": f"{home}/cache",
                "HELM_CONFIG_HOME": f"{home}/config",
                "HELM_DATA_HOME": f"{home}/data",
            }
            result = subprocess.run(
                [str(binary), *args], env=env, capture_output=True, text=True, check=False
            )
        if result.returncode != 0:
            raise InfraError(
                f"helm {' '.join(args[:2])} failed (exit {result.returncode}): "
                f"{result.stderr.strip() or result.stdout.strip()}"
            )
        return result.stdout

    def installed(self) -> Installed | None:
        """The gpu-operator release in any namespace, or None."""
        listed = json.loads(self.run("list", "--all-namespaces", "--all", "--output", "json",
                                     "--filter", f"^{NAME}$") or "[]")  # fmt: skip
        if not listed:
            return None
        found = listed[0]
        return Installed(found["namespace"], found["status"])

    def install(self, namespace: str, monitoring: bool, values: Path = VALUES_FILE) -> None:
        """`helm upgrade --install` of the pinned chart with the stack's values, waiting as
        terraform's `wait = true` does (the operator's Deployment and NFD's pods ready)."""
        operator = release()
        self.run(
            "upgrade", "--install", NAME, str(operator.chart),
            "--namespace", namespace, "--create-namespace", *_values(values, monitoring),
            "--no-hooks", "--wait", "--timeout", TIMEOUT,
        )  # fmt: skip

    def uninstall(self, namespace: str) -> None:
        self.run("uninstall", NAME, "--namespace", namespace, "--no-hooks", "--wait",
                 "--timeout", TIMEOUT)  # fmt: skip

    def service_monitor(self, namespace: str) -> bool:
        """Whether the installed release was given dcgm-exporter's ServiceMonitor."""
        given = json.loads(self.run("get", "values", NAME, "--namespace", namespace,
                                    "--output", "json") or "{}") or {}  # fmt: skip
        return bool(((given.get("dcgmExporter") or {}).get("serviceMonitor") or {}).get("enabled"))

    def rendered(
        self, kind: str, namespace: str, values: Path = VALUES_FILE, monitoring: bool = False
    ) -> dict:
        """The one object of `kind` the chart renders with these values (`helm template`):
        what an install would create, without a cluster."""
        text = self.run("template", NAME, str(release().chart), "--namespace", namespace,
                        *_values(values, monitoring))  # fmt: skip
        found = [d for d in yaml.safe_load_all(text) if d and d.get("kind") == kind]
        if len(found) != 1:
            raise InfraError(f"the gpu-operator chart renders {len(found)} {kind} objects, not 1")
        return found[0]


def _values(values: Path, monitoring: bool) -> list[str]:
    """What the stack gives the chart: its values file, and the ServiceMonitor set beside it
    (gpu_operator.tf)."""
    return ["--values", str(values), "--set", f"{SERVICE_MONITOR}={str(monitoring).lower()}"]
