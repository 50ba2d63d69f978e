"""The rehearsal's real control plane: find or build etcd, the three Kubernetes components and
the kubectl of their release.

The versions are the ones `go/controlplane/go.mod` pins (one place: the Go module that builds
them). Prebuilt binaries win when the user has them (a directory named by
`EKS_GPU_LAB_CONTROL_PLANE_BIN`, or the envtest convention `KUBEBUILDER_ASSETS` when it holds
all four); otherwise the first use builds them from their Go modules into a per-version cache
outside the repository, printing what it builds and for how long, and later uses reuse them.

The same module also builds the project's own programs: the node endpoint (`cmd/node-endpoint`,
the kubelet API every simulated node points at), the nodes' container runtime
(`cmd/node-runtime`, behind each real kubelet) and the GPU device plugin (`cmd/device-plugin`).
They are our code, so their cache entries are named by a hash of the module's Go sources,
go.mod and go.sum: an edit builds them afresh, and prebuilt directories never supply them.

metrics-server (the stack's metrics-server addon) comes from its own module,
`go/metrics-server` (its k8s.io pins are its own release's, not the control plane's); the
alert rules' tools likewise: promtool and Prometheus from `go/prometheus`, kube-state-metrics
from `go/kube-state-metrics`. The prebuilt directory supplies each when it holds one, else it is
built once per version.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from labs.errors import LabError

GO_MODULE = Path(__file__).resolve().parents[3] / "go" / "controlplane"
PREBUILT_ENV = "EKS_GPU_LAB_CONTROL_PLANE_BIN"
ENVTEST_ENV = "KUBEBUILDER_ASSETS"
CACHE_ENV = "EKS_GPU_LAB_CACHE"
KUBERNETES_MODULE = "k8s.io/kubernetes"
ETCD_MODULE = "go.etcd.io/etcd/server/v3"
# Each program and the Go package that builds it, in build order (smallest first).
PROGRAMS = {
    "etcd": ETCD_MODULE,
    "kube-scheduler": f"{KUBERNETES_MODULE}/cmd/kube-scheduler",
    "kube-controller-manager": f"{KUBERNETES_MODULE}/cmd/kube-controller-manager",
    "kube-apiserver": f"{KUBERNETES_MODULE}/cmd/kube-apiserver",
    # The client at the server's version: kubectl warns beyond one minor version of skew.
    "kubectl": f"{KUBERNETES_MODULE}/cmd/kubectl",
    # Every rehearsal node's kubelet, behind the lab's own container runtime.
    "kubelet": f"{KUBERNETES_MODULE}/cmd/kubelet",
}
NODE_ENDPOINT = "node-endpoint"
NODE_ENDPOINT_PACKAGE = "./cmd/node-endpoint"
NODE_RUNTIME = "node-runtime"
NODE_RUNTIME_PACKAGE = "./cmd/node-runtime"
DEVICE_PLUGIN = "device-plugin"
DEVICE_PLUGIN_PACKAGE = "./cmd/device-plugin"
METRICS_SERVER = "metrics-server"
PROMTOOL = "promtool"
PROMETHEUS = "prometheus"
KUBE_STATE_METRICS = "kube-state-metrics"
GPU_OPERATOR = "gpu-operator"
HELM = "helm"
NFD_MASTER = "nfd-master"
NFD_WORKER = "nfd-worker"
NFD_GC = "nfd-gc"
PROGRESS_EVERY = 30.0
# A release the proxy serves only as its commit: v0.0.0-<UTC timestamp>-<12-hex commit>.
PSEUDO_VERSION = re.compile(r"^v0\.0\.0-\d{14}-([0-9a-f]{12})$")

Say = Callable[[str], None]


class ControlPlaneUnavailable(LabError):
    """The control plane's programs are neither present nor buildable here; says both ways."""


@dataclass(frozen=True)
class Versions:
    """What go.mod pins: the Kubernetes release (matching the stack's EKS version) and etcd's."""

    kubernetes: str
    etcd: str

    @property
    def cache_name(self) -> str:
        return f"kubernetes-{self.kubernetes}-etcd-{self.etcd}"


def pinned_versions(go_mod: Path = GO_MODULE / "go.mod") -> Versions:
    """Read both versions from the module's `require` block."""
    return Versions(required(go_mod, KUBERNETES_MODULE), required(go_mod, ETCD_MODULE))


def required(go_mod: Path, module: str) -> str:
    """The version `go_mod` requires of `module`."""
    return _require_line(go_mod, module).group(1)


def release(go_mod: Path, module: str) -> str:
    """The release `go_mod` requires of `module`: its version, or for a pseudo-version (a
    release the proxy serves only as its commit) the tag its line's comment names."""
    line = _require_line(go_mod, module)
    if line.group(2) and PSEUDO_VERSION.match(line.group(1)):
        return line.group(2)
    return line.group(1)


def commit(version: str) -> str:
    """The commit a pseudo-version names (its last part), or "" for a tagged version."""
    found = PSEUDO_VERSION.match(version)
    return found.group(1) if found else ""


def _require_line(go_mod: Path, module: str) -> re.Match[str]:
    found = re.search(
        rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)(?:\s*//\s*(v[\w.-]+))?",
        go_mod.read_text(),
        re.M,
    )
    if not found:
        raise ControlPlaneUnavailable(f"{go_mod} does not require {module}")
    return found


def staging_replaces(kubernetes_go_mod: str, kubernetes_version: str) -> dict[str, str]:
    """The replace each module depending on k8s.io/kubernetes needs: its staging modules
    (required at v0.0.0, replaced by ./staging paths) at the release's v0.x.y tags."""
    tag = "v0." + kubernetes_version.removeprefix("v1.")
    staged = re.findall(r"^\s*(\S+)\s+=>\s+\./staging/", kubernetes_go_mod, re.MULTILINE)
    return {module: tag for module in staged}


def version_ldflags(kubernetes_version: str) -> str:
    """What `/version` reports: without these it says v0.0.0-master, which kubectl's skew check
    and the GPU Operator (semver only) cannot parse."""
    major, minor = kubernetes_version.removeprefix("v").split(".")[:2]
    values = {
        "k8s.io/component-base/version.gitVersion": kubernetes_version,
        "k8s.io/component-base/version.gitMajor": major,
        "k8s.io/component-base/version.gitMinor": minor,
        "k8s.io/component-base/version.gitTreeState": "clean",
        "k8s.io/client-go/pkg/version.gitVersion": kubernetes_version,
        "k8s.io/client-go/pkg/version.gitMajor": major,
        "k8s.io/client-go/pkg/version.gitMinor": minor,
    }
    return " ".join(["-s", "-w", *(f"-X {name}={value}" for name, value in values.items())])


def location_env() -> dict[str, str]:
    """The variables, of those set here, that say where the lab's programs are: a process the
    lab starts with an environment of its own (a container's) finds the same binaries."""
    names = (CACHE_ENV, PREBUILT_ENV, ENVTEST_ENV, "XDG_CACHE_HOME")
    return {name: os.environ[name] for name in names if os.environ.get(name)}


def cache_root() -> Path:
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "eks-gpu-lab"


def _complete(directory: Path) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in PROGRAMS)


def _prebuilt() -> Path | None:
    explicit = os.environ.get(PREBUILT_ENV)
    if explicit:
        if not _complete(Path(explicit)):
            missing = [name for name in PROGRAMS if not os.access(Path(explicit, name), os.X_OK)]
            raise ControlPlaneUnavailable(
                f"{PREBUILT_ENV}={explicit} lacks {', '.join(missing)}; put all of "
                f"{', '.join(PROGRAMS)} there, or unset it to build them from Go modules"
            )
        return Path(explicit)
    envtest = os.environ.get(ENVTEST_ENV)
    return Path(envtest) if envtest and _complete(Path(envtest)) else None


def binaries_dir() -> Path:
    """Where the control plane's programs are or will be: the prebuilt directory, else the
    cache entry of the pinned versions (kubectl from there is the server's version)."""
    return _prebuilt() or cache_root() / "controlplane" / pinned_versions().cache_name


def binaries(say: Say = print) -> Path:
    """The directory holding every program of `PROGRAMS`: prebuilt, cached, or built now."""
    target = binaries_dir()
    if not _complete(target):
        build(pinned_versions(), target, say)
    return target


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise ControlPlaneUnavailable(
            "the rehearsal runs the real Kubernetes control plane and Go (1.25 or newer) is not "
            "on PATH to build it; install Go (https://go.dev/dl/) and run again (the first build "
            f"takes about 15 minutes on 2 cores, later ones reuse {cache_root()}), or set "
            f"{PREBUILT_ENV} to a directory holding prebuilt {', '.join(PROGRAMS)}"
        )
    return go


def _go_env() -> dict[str, str]:
    # GOTOOLCHAIN=local: build with the Go that is here, never download another one.
    return {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local"}


def build(versions: Versions, target: Path, say: Say = print) -> None:
    """Build each missing program into `target`, saying what and how long."""
    go = _go()
    target.mkdir(parents=True, exist_ok=True)
    missing = [name for name in PROGRAMS if not os.access(target / name, os.X_OK)]
    say(
        f"building the rehearsal's control plane (Kubernetes {versions.kubernetes}, etcd "
        f"{versions.etcd}) into {target}: {', '.join(missing)}; the first build takes about "
        "15 minutes on 2 idle cores, later runs reuse it"
    )
    for number, name in enumerate(missing, 1):
        _build_one(go, name, versions, target, f"{name} ({number}/{len(missing)})", say)


def _build_one(go: str, name: str, versions: Versions, target: Path, label: str, say: Say) -> None:
    _go_build(go, PROGRAMS[name], target / name, version_ldflags(versions.kubernetes), label, say)


def _go_build(
    go: str,
    package: str,
    output: Path,
    ldflags: str,
    label: str,
    say: Say,
    module: Path = GO_MODULE,
) -> None:
    """`go build` one package of `module` into `output`, ticking while it runs; a failure says
    why."""
    # Each build its own partial file: two processes building the same program at once (two
    # test sessions on a fresh machine) must not rename each other's.
    partial = output.with_name(f".{output.name}.{os.getpid()}.partial")
    command = [go, "build", "-trimpath", "-ldflags", ldflags, "-o", str(partial), package]
    started = time.monotonic()
    say(f"  {label}: go build {package}")
    done = threading.Event()
    ticker = threading.Thread(target=_tick, args=(done, label, started, say), daemon=True)
    ticker.start()
    try:
        result = subprocess.run(
            command, cwd=module, env=_go_env(), capture_output=True, text=True, check=False
        )
    finally:
        done.set()
        ticker.join()
    if result.returncode != 0:
        raise ControlPlaneUnavailable(
            f"building {output.name} failed ({' '.join(command)} in {module}, exit "
            f"{result.returncode}):\n{result.stderr.strip()[-3000:]}"
        )
    partial.rename(output)
    say(f"  {label}: built in {time.monotonic() - started:.0f} s")


def _tick(done: threading.Event, label: str, started: float, say: Say) -> None:
    while not done.wait(PROGRESS_EVERY):
        say(f"  {label}: still building, {time.monotonic() - started:.0f} s so far")


def source_digest(module: Path = GO_MODULE) -> str:
    """A hash of what the node endpoint is built from: every Go file of the module (names and
    contents), go.mod and go.sum."""
    digest = hashlib.sha256()
    files = sorted([*module.rglob("*.go"), module / "go.mod", module / "go.sum"])
    for path in files:
        content = path.read_bytes()
        digest.update(f"{path.relative_to(module)}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()[:16]


def node_endpoint_binary(say: Say = print) -> Path:
    """The node endpoint built from this checkout's sources: cached, or built now (about a
    minute on 2 cores from an empty Go build cache, seconds after the control plane's build)."""
    return own_binary(NODE_ENDPOINT, NODE_ENDPOINT_PACKAGE, "node endpoint", say)


def node_runtime_binary(say: Say = print) -> Path:
    """The nodes' container runtime (`cmd/node-runtime`), built like the node endpoint."""
    return own_binary(NODE_RUNTIME, NODE_RUNTIME_PACKAGE, "nodes' container runtime", say)


def device_plugin_binary(say: Say = print) -> Path:
    """The GPU nodes' device plugin (`cmd/device-plugin`), built like the node endpoint."""
    return own_binary(DEVICE_PLUGIN, DEVICE_PLUGIN_PACKAGE, "GPU device plugin", say)


def own_binary(name: str, package: str, about: str, say: Say) -> Path:
    """One of the project's own programs of the module: cached under a hash of its sources, or
    built now."""
    binary = cache_root() / name / source_digest() / name
    if os.access(binary, os.X_OK):
        return binary
    go = _go()
    binary.parent.mkdir(parents=True, exist_ok=True)
    say(f"building the rehearsal's {about} ({package}) into {binary.parent}")
    _go_build(go, package, binary, "-s -w", name, say)
    return binary


@dataclass(frozen=True)
class PinnedProgram:
    """A program built from a Go module of its own under `go/`, at the release its go.mod
    requires of `pins` (the cache entry's name), stamped with that version."""

    name: str
    module: Path
    pins: str
    package: str
    version_variable: str
    about: str
    # Where the commit is stamped, for a release the proxy serves only as a pseudo-version.
    commit_variable: str = ""
    # Further `-X variable=value` settings the project's own release build makes.
    settings: tuple[tuple[str, str], ...] = ()

    def version(self) -> str:
        """The release: the cache entry's name and what the program says it is."""
        return release(self.module / "go.mod", self.pins)

    def ldflags(self) -> str:
        flags = f"-s -w -X {self.version_variable}={self.version()}"
        pinned = commit(required(self.module / "go.mod", self.pins))
        if self.commit_variable and pinned:
            flags += f" -X {self.commit_variable}={pinned}"
        return flags + "".join(f" -X {name}={value}" for name, value in self.settings)


METRICS_SERVER_PROGRAM = PinnedProgram(
    METRICS_SERVER,
    GO_MODULE.parent / "metrics-server",
    "sigs.k8s.io/metrics-server",
    "sigs.k8s.io/metrics-server/cmd/metrics-server",
    "k8s.io/client-go/pkg/version.gitVersion",  # what its Makefile stamps
    "about 4 minutes on 2 idle cores from an empty Go build cache",
)
PROMTOOL_PROGRAM = PinnedProgram(
    PROMTOOL,
    GO_MODULE.parent / "prometheus",
    "github.com/prometheus/prometheus",
    "github.com/prometheus/prometheus/cmd/promtool",
    "github.com/prometheus/common/version.Version",
    "about 7 minutes on 2 idle cores from an empty Go build cache",
)
PROMETHEUS_PROGRAM = PinnedProgram(
    PROMETHEUS,
    GO_MODULE.parent / "prometheus",
    "github.com/prometheus/prometheus",
    "github.com/prometheus/prometheus/cmd/prometheus",
    "github.com/prometheus/common/version.Version",
    "about 5 minutes on 2 idle cores after promtool, whose packages it shares",
)
KUBE_STATE_METRICS_PROGRAM = PinnedProgram(
    KUBE_STATE_METRICS,
    GO_MODULE.parent / "kube-state-metrics",
    "k8s.io/kube-state-metrics/v2",
    "k8s.io/kube-state-metrics/v2",
    "github.com/prometheus/common/version.Version",
    "about 4 minutes on 2 idle cores from an empty Go build cache",
)
# The operator's version and commit as NVIDIA's Makefile stamps them (`gpu-operator` logs
# "version: v25.3.4, commit: ..." after Go's automaxprocs line).
GPU_OPERATOR_PROGRAM = PinnedProgram(
    GPU_OPERATOR,
    GO_MODULE.parent / "gpu-operator",
    "github.com/NVIDIA/gpu-operator",
    "github.com/NVIDIA/gpu-operator/cmd/gpu-operator",
    "github.com/NVIDIA/gpu-operator/internal/info.version",
    "about 2 minutes on 2 idle cores from an empty Go build cache (80 s measured)",
    commit_variable="github.com/NVIDIA/gpu-operator/internal/info.gitCommit",
)
HELM_PROGRAM = PinnedProgram(
    HELM,
    GO_MODULE.parent / "helm",
    "helm.sh/helm/v3",
    "helm.sh/helm/v3/cmd/helm",
    "helm.sh/helm/v3/internal/version.version",
    "about 2 minutes on 2 idle cores from an empty Go build cache (77 s measured)",
)

# Node Feature Discovery as its image builds it (its Dockerfile: HOSTMOUNT_PREFIX=/host-, so the
# worker reads the node's /sys, /etc and /boot where the chart mounts them).
NFD_MODULE = "sigs.k8s.io/node-feature-discovery"
NFD_SETTINGS = ((f"{NFD_MODULE}/pkg/utils/hostpath.pathPrefix", "/host-"),)
NFD_PROGRAMS = tuple(
    PinnedProgram(
        name,
        GO_MODULE.parent / "node-feature-discovery",
        NFD_MODULE,
        f"{NFD_MODULE}/cmd/{name}",
        f"{NFD_MODULE}/pkg/version.version",
        about,
        settings=NFD_SETTINGS,
    )
    for name, about in (
        (NFD_MASTER, "about 3 minutes on 2 idle cores from an empty Go build cache"),
        (NFD_WORKER, "under a minute after nfd-master, whose packages it shares"),
        (NFD_GC, "under a minute after nfd-master"),
    )
)


def module_dir(module: Path, required_module: str) -> Path:
    """Where Go keeps the files of the module `module`'s go.mod requires (downloaded now when
    missing): a chart or manifests that come with a program's source."""
    result = subprocess.run(
        [_go(), "mod", "download", "-json", required_module],
        cwd=module, env=_go_env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise ControlPlaneUnavailable(
            f"cannot find {required_module} (go mod download in {module}): "
            f"{result.stderr.strip() or result.stdout.strip()}"
        )
    return Path(json.loads(result.stdout)["Dir"])


def metrics_server_version() -> str:
    """The metrics-server release `go/metrics-server/go.mod` pins."""
    return METRICS_SERVER_PROGRAM.version()


def program_path(program: PinnedProgram) -> Path:
    """Where `program` is or will be: the prebuilt directory's when it holds one, else its
    cache entry."""
    explicit = os.environ.get(PREBUILT_ENV)
    if explicit and os.access(Path(explicit, program.name), os.X_OK):
        return Path(explicit, program.name)
    return cache_root() / program.name / program.version() / program.name


def pinned_binary(program: PinnedProgram, say: Say = print) -> Path:
    """`program`: from the prebuilt directory when it holds one, else cached per version, else
    built now (once its packages are in Go's build cache, a minute or so)."""
    binary = program_path(program)
    if os.access(binary, os.X_OK):
        return binary
    version = program.version()
    go = _go()
    binary.parent.mkdir(parents=True, exist_ok=True)
    say(f"building {program.name} {version} into {binary.parent} ({program.about})")
    _go_build(go, program.package, binary, program.ldflags(), program.name, say, program.module)
    return binary
