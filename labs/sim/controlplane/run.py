"""Run etcd, kube-apiserver, kube-controller-manager and kube-scheduler for one rehearsal lab
(or, held still, etcd and kube-apiserver alone: nothing moves what a client puts in).

Everything listens on loopback only, speaks TLS with the lab's own CA, and keeps its files
under the lab's directory, so `lab.down --destroy` (or a test) can find and stop each process
by that directory even after the process that started them was killed. The processes also die
with their starter (the kernel's parent-death signal), so a killed world leaves none behind.
"""

from __future__ import annotations

import base64
import ctypes
import functools
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from labs.errors import LabError
from labs.sim.controlplane import build, pki
from labs.sim.controlplane.kubeconfig import kubeconfig_document, write_kubeconfig
from labs.sim.controlplane.tls import LOOPBACK
from labs.sim.controlplane.webhook import (
    AUTHORIZE_PATH,
    REVIEW_PATH,
    Access,
    AuthWebhook,
    write_webhook_config,
)
from labs.sim.logs import log_tail

READY_TIMEOUT = 120.0
STOP_TIMEOUT = 3.0
# The admission plugins EKS enables beyond the API server's defaults: it adds the
# nvidia.com/gpu toleration to every pod that requests a GPU (EKS documents the list).
EXTRA_ADMISSION = "ExtendedResourceToleration"
# How fast a node that stops heartbeating is noticed (upstream: 40 s, then 5 s checks);
# the rehearsal's world stops a node in seconds, so the controller looks as often.
NODE_MONITOR = {"node-monitor-period": "2s", "node-monitor-grace-period": "20s"}
# How long the API server trusts the webhook's answer: well inside an EKS token's 15 minutes.
WEBHOOK_CACHE = "10s"
_PR_SET_PDEATHSIG = 1
FRONT_PROXY_CLIENT = "front-proxy-client"
METRICS_SERVER_USER = "metrics-server"
# Connections a world's client keeps to the API server: one per watch (about twenty kinds
# followed) and room for the controllers' concurrent writes.
POOL_SIZE = 32
# Ports for the lab's programs: drawn from the PORT_SPAN ports below the ephemeral range, none
# twice in one process (two programs of one world never share one), PORT_TRIES draws at most.
PORT_SPAN = 16384
PORT_TRIES = 200
_PORTS_GIVEN: set[int] = set()
_PORTS_LOCK = threading.Lock()
# What an error quotes of a program's log when it exited at start.
LOG_QUOTE_BYTES = 8192
LOG_QUOTE_LINES = 6


class ControlPlaneError(LabError):
    """A component did not start or answer; the message names it and its log."""


def free_port() -> int:
    """A loopback port a program of the lab can listen on, from below the kernel's ephemeral
    range: a port from that range can be handed to any client's connection between this probe
    and the program's own bind (a CI run's kube-apiserver exited on "address already in use")."""
    low = _ephemeral_low()
    for _ in range(PORT_TRIES):
        port = random.randrange(max(1024, low - PORT_SPAN), low)
        with _PORTS_LOCK:
            if port in _PORTS_GIVEN:
                continue
            _PORTS_GIVEN.add(port)
        with socket.socket() as probe:
            try:
                probe.bind((LOOPBACK, port))
            except OSError:
                continue
            return port
    raise ControlPlaneError(
        f"no free loopback port below {low} after {PORT_TRIES} tries: stop other labs "
        "(`invoke lab.list` shows them) and try again"
    )


@functools.cache
def _ephemeral_low() -> int:
    """The lowest port of the kernel's ephemeral range, read once per process."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return max(low, 1024 + PORT_SPAN)


def die_with_parent() -> None:
    """The kernel kills the child when the *thread* that started it ends: start a plane from a
    thread that lives as long as it should."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass(frozen=True)
class Credentials:
    """Where the API server is and a client certificate to use there."""

    url: str
    ca_file: Path
    cert_file: Path
    key_file: Path

    def api_client(self, pool_size: int = POOL_SIZE) -> Any:
        """A kubernetes ApiClient with this certificate: `pool_size` connections kept open
        (each watch holds one), no retries (callers retry by what they read)."""
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url.rstrip("/")
        configuration.ssl_ca_cert = str(self.ca_file)
        configuration.cert_file = str(self.cert_file)
        configuration.key_file = str(self.key_file)
        configuration.connection_pool_maxsize = pool_size
        configuration.retries = False
        return client.ApiClient(configuration)


def spawn(
    command: list[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start one of the lab's programs, its output appended to `log`; it dies with its starter.
    `env`: variables added to this process's environment."""
    with log.open("ab") as output:
        return subprocess.Popen(
            command,
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
            close_fds=True,
            env={**os.environ, **env} if env else None,
        )


def reap(process: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait for a process told to stop; kill it once `timeout` has passed."""
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_answering(
    url: str, context: ssl.SSLContext, alive: Callable[[], None], what: str, log: Path
) -> None:
    """Poll `url` until it answers; `alive()` raises as soon as the program behind it exited."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        alive()
        try:
            with urllib.request.urlopen(url, context=context, timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    raise ControlPlaneError(
        f"{what} did not answer {url} in {READY_TIMEOUT:.0f} s; its log is {log}"
    )


def described(process: subprocess.Popen[bytes], log: Path) -> dict[str, Any]:
    """A running program as the lab's status checks it from another process: pid, program
    (its argv[0]'s name, so a reused pid is not taken for it) and log."""
    command = process.args if isinstance(process.args, list) else [process.args]
    return {"pid": process.pid, "program": Path(str(command[0])).name, "log": str(log)}


@dataclass
class Served:
    """One of the lab's own programs beside the plane (the node endpoint, metrics-server): started,
    waited for until it answers, stopped."""

    name: str
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(
        self,
        command: list[str],
        url: str,
        context: ssl.SSLContext,
        env: dict[str, str] | None = None,
        on_exit: Callable[[], None] | None = None,
    ) -> None:
        """Spawn it and wait until `url` answers; a failed start stops it and names its log.
        `on_exit` is called (from a thread of its own) once the process ends, however."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.process = process = spawn(command, self.log, env)
        if on_exit is not None:
            threading.Thread(
                target=lambda: (process.wait(), on_exit()), name=f"{self.name}-exit", daemon=True
            ).start()
        try:
            wait_answering(url, context, self._alive, self.name, self.log)
        except BaseException:
            self.stop()
            raise

    def exit_code(self) -> int | None:
        """None while it runs (or was never started)."""
        return None if self.process is None else self.process.poll()

    def _alive(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise ControlPlaneError(
                f"{self.name} exited with {self.process.returncode}; its log is {self.log}"
            )

    def stop(self) -> None:
        """Stop the process (its children die with it); kill it if it does not stop in time."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        reap(process, STOP_TIMEOUT)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def described(self) -> dict[str, Any]:
        """{name: pid, program, log} while it runs, {} otherwise."""
        return {self.name: described(self.process, self.log)} if self.process else {}


@dataclass
class BesidePlane:
    """A program of the lab's that talks to the plane (metrics-server, kube-state-metrics,
    Prometheus): listening on a loopback port chosen up front (a route may lead there before
    it runs), its log under `home/logs`; a subclass names it (`program`) and starts it."""

    home: Path
    plane: ControlPlane
    port: int = field(default_factory=free_port, kw_only=True)
    program: ClassVar[str] = ""
    _served: Served = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._served = Served(self.program, self.home / "logs" / f"{self.program}.log")

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def stop(self) -> None:
        self._served.stop()

    @property
    def pid(self) -> int | None:
        return self._served.pid

    def described(self) -> dict[str, dict[str, Any]]:
        return self._served.described()

    def exit_code(self) -> int | None:
        return self._served.exit_code()


@dataclass
class ControlPlane:
    """The four processes of one lab and where they keep their files."""

    home: Path
    # Who the lab's bearer tokens are and what they may do (the world's EKS access entries):
    # the API server asks webhooks of ours; None leaves client certificates the only way in.
    access: Access | None = None
    api_url: str = ""
    ca_pem: str = ""
    # The lab's CA once started: it also issues the node endpoint's serving certificate.
    ca: pki.Authority | None = None
    admin_kubeconfig: Path = field(default_factory=Path)
    # The unix socket of the network between the API server and the nodes (the node endpoint's
    # HTTP CONNECT proxy): the API server's egress to nodes and pods goes through it.
    egress_socket: Path | None = None
    # etcd and kube-apiserver only, no kube-controller-manager and no kube-scheduler: what a
    # client puts in stays exactly as put (the tests' fixed cluster states).
    held_still: bool = False
    _processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _webhook: AuthWebhook | None = None

    def start(self, say: Callable[[str], None] = print) -> None:
        """Start etcd, then the API server, then both controllers (none when held still); wait
        until /readyz says ok. A failure stops what already started before it is raised."""
        bin_dir = build.binaries(say)
        try:
            self._start(bin_dir)
        except BaseException:
            self.stop()
            raise

    def _start(self, bin_dir: Path) -> None:
        # A plane starts empty, as the world it serves does (moto too): a previous run's data
        # would hold objects no world controller knows.
        shutil.rmtree(self.home / "etcd", ignore_errors=True)
        pki_dir = self.home / "pki"
        ca, files = _write_pki(pki_dir)
        self.ca, self.ca_pem = ca, ca.cert_pem
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        self.api_url = f"https://{LOOPBACK}:{api_port}"
        self._spawn(bin_dir, "etcd", _etcd_args(self.home, etcd_port, peer_port))
        apiserver = _apiserver_args(self.home, files, etcd_port, api_port, self.access is not None)
        if self.egress_socket is not None:
            egress = _egress_config(self.home, self.egress_socket)
            apiserver.append(f"--egress-selector-config-file={egress}")
        if self.access is not None:
            apiserver += self._start_webhook(ca, self.access)
        self._spawn(bin_dir, "kube-apiserver", apiserver)
        self.admin_kubeconfig = self.write_kubeconfig("admin")
        self._wait_ready()
        if self.held_still:
            return
        for component in ("kube-controller-manager", "kube-scheduler"):
            config = self.write_kubeconfig(component)
            args = (
                _controller_args(files, self.home) if component == "kube-controller-manager" else []
            )
            self._spawn(bin_dir, component, [f"--kubeconfig={config}", *args, *_common_args()])

    def _start_webhook(self, ca: pki.Authority, access: Access) -> list[str]:
        self._webhook = AuthWebhook(access, ca)
        url = self._webhook.start(LOOPBACK)
        ca_data = base64.b64encode(ca.cert_pem.encode()).decode()
        tokens = write_webhook_config(
            self.home / "token-webhook.kubeconfig", url + REVIEW_PATH, ca_data
        )
        authorizer = write_webhook_config(
            self.home / "authorization-webhook.kubeconfig", url + AUTHORIZE_PATH, ca_data
        )
        return [
            f"--authentication-token-webhook-config-file={tokens}",
            "--authentication-token-webhook-version=v1",
            f"--authentication-token-webhook-cache-ttl={WEBHOOK_CACHE}",
            f"--authorization-webhook-config-file={authorizer}",
            "--authorization-webhook-version=v1",
        ]

    def write_kubeconfig(self, user: str) -> Path:
        """A kubeconfig that authenticates as `user` ("admin", a component, metrics-server)
        with its client certificate."""
        credentials = self.credentials(user)
        certificate = {
            "client-certificate": str(credentials.cert_file),
            "client-key": str(credentials.key_file),
        }
        ca_data = base64.b64encode(self.ca_pem.encode()).decode()
        path = self.home / f"{user}.kubeconfig"
        document = kubeconfig_document(self.api_url, "lab", "", ca_data, user, certificate)
        return write_kubeconfig(path, document)

    def _spawn(self, bin_dir: Path, name: str, args: list[str]) -> None:
        log = self.home / "logs" / f"{name}.log"
        self._processes[name] = spawn([str(bin_dir / name), *args], log)

    def _wait_ready(self) -> None:
        context = ssl.create_default_context(cadata=self.ca_pem)
        admin = self.home / "pki"
        context.load_cert_chain(admin / "admin.crt", admin / "admin.key")
        log = self.home / "logs" / "kube-apiserver.log"
        wait_answering(f"{self.api_url}/readyz", context, self._check_alive, "kube-apiserver", log)

    def _check_alive(self) -> None:
        for name, process in self._processes.items():
            if process.poll() is not None:
                log = self.home / "logs" / f"{name}.log"
                said = "\n".join(log_tail(log, LOG_QUOTE_BYTES).splitlines()[-LOG_QUOTE_LINES:])
                raise ControlPlaneError(
                    f"{name} exited with {process.returncode}; its log ({log}) ends with:\n{said}"
                )

    def stop(self) -> None:
        """Kill the four processes and wait for them. Nothing a plane holds outlives it (the next
        start begins with an empty etcd; the audit log is written as requests come), and the
        API server's graceful shutdown alone took a second of every world's stop."""
        for process in self._processes.values():
            if process.poll() is None:
                process.kill()
        for process in self._processes.values():
            process.wait()
        self._processes.clear()
        if self._webhook is not None:
            self._webhook.stop()

    def credentials(self, user: str) -> Credentials:
        """The client certificate of `user` ("admin", a component) on this plane."""
        pki_dir = self.home / "pki"
        return Credentials(
            self.api_url, pki_dir / "ca.crt", pki_dir / f"{user}.crt", pki_dir / f"{user}.key"
        )

    def described(self) -> dict[str, dict[str, Any]]:
        """Each component's pid, program and log (see `described`)."""
        logs = self.home / "logs"
        return {name: described(p, logs / f"{name}.log") for name, p in self._processes.items()}

    @property
    def pids(self) -> dict[str, int]:
        return {name: process.pid for name, process in self._processes.items()}


def _write_pki(pki_dir: Path) -> tuple[pki.Authority, dict[str, Path]]:
    """The CA, the serving certificate, each component's client certificate and the SA keys."""
    ca = pki.Authority.new()
    files = {"ca.crt": pki.write_private(pki_dir / "ca.crt", ca.cert_pem)}
    files["ca.key"] = pki.write_private(pki_dir / "ca.key", pki.key_pem(ca.key))
    leaves = {
        "apiserver": ca.issue(
            "kube-apiserver", server=True, addresses=(LOOPBACK, pki.KUBERNETES_SERVICE_IP)
        ),
        "admin": ca.issue("kubernetes-admin", "system:masters"),
        "apiserver-kubelet-client": ca.issue("kube-apiserver-kubelet-client", "system:masters"),
        "kube-controller-manager": ca.issue("system:kube-controller-manager"),
        "kube-scheduler": ca.issue("system:kube-scheduler"),
        # The aggregator's identity towards extension API servers (metrics-server), which
        # trust it for the X-Remote-* headers it sends (--requestheader-allowed-names).
        FRONT_PROXY_CLIENT: ca.issue(FRONT_PROXY_CLIENT),
        # metrics-server as the addon's ServiceAccount (RBAC binds to that user name).
        METRICS_SERVER_USER: ca.issue(f"system:serviceaccount:kube-system:{METRICS_SERVER_USER}"),
    }
    for name, issued in leaves.items():
        files[f"{name}.crt"] = pki.write_private(pki_dir / f"{name}.crt", issued.cert_pem)
        files[f"{name}.key"] = pki.write_private(pki_dir / f"{name}.key", issued.key_pem)
    private, public = pki.service_account_key()
    files["sa.key"] = pki.write_private(pki_dir / "sa.key", private)
    files["sa.pub"] = pki.write_private(pki_dir / "sa.pub", public)
    (pki_dir.parent / "logs").mkdir(parents=True, exist_ok=True)
    return ca, files


def _etcd_args(home: Path, client_port: int, peer_port: int) -> list[str]:
    client, peer = f"http://{LOOPBACK}:{client_port}", f"http://{LOOPBACK}:{peer_port}"
    return [
        f"--data-dir={home / 'etcd'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=default={peer}",
        "--log-level=warn",
        "--quota-backend-bytes=1073741824",
        # A plane starts empty every time (see _start): nothing on disk outlives it, so etcd
        # need not wait for the disk after each write.
        "--unsafe-no-fsync",
    ]


def _apiserver_args(
    home: Path, files: dict[str, Path], etcd_port: int, port: int, access_webhook: bool
) -> list[str]:
    """`access_webhook`: after RBAC, the access entries decide (EKS's own authorizer)."""
    return [
        f"--etcd-servers=http://{LOOPBACK}:{etcd_port}",
        f"--bind-address={LOOPBACK}",
        f"--advertise-address={LOOPBACK}",
        f"--secure-port={port}",
        f"--cert-dir={home / 'pki'}",
        f"--tls-cert-file={files['apiserver.crt']}",
        f"--tls-private-key-file={files['apiserver.key']}",
        f"--client-ca-file={files['ca.crt']}",
        f"--kubelet-client-certificate={files['apiserver-kubelet-client.crt']}",
        f"--kubelet-client-key={files['apiserver-kubelet-client.key']}",
        # Real kubelets report their Hostname too; the nodes are reached by address.
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        f"--service-account-key-file={files['sa.pub']}",
        f"--service-account-signing-key-file={files['sa.key']}",
        "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-cluster-ip-range={pki.SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC" + (",Webhook" if access_webhook else ""),
        f"--enable-admission-plugins={EXTRA_ADMISSION}",
        "--allow-privileged=true",
        "--endpoint-reconciler-type=none",
        # The aggregation layer (APIService v1beta1.metrics.k8s.io): who the API server is
        # towards extension API servers, and how they may believe the user it names.
        f"--requestheader-client-ca-file={files['ca.crt']}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={files[f'{FRONT_PROXY_CLIENT}.crt']}",
        f"--proxy-client-key-file={files[f'{FRONT_PROXY_CLIENT}.key']}",
        f"--audit-policy-file={_audit_policy(home)}",
        f"--audit-log-path={home / 'logs' / 'audit.log'}",
        "--audit-log-maxsize=50",
        "--audit-log-maxbackup=1",
    ]


def _audit_policy(home: Path) -> Path:
    """Who did what, for every request: the proof that a reader (the doctor) only read. One
    event per request (when its answer is sent), not a second when it arrives: half the writes."""
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [{"level": "Metadata"}],
    }
    path = home / "audit-policy.yaml"
    path.write_text(json.dumps(policy))
    return path


def _egress_config(home: Path, socket: Path) -> Path:
    """Traffic to the cluster (kubelets, pods, services) through an HTTP CONNECT proxy on a
    unix socket, as konnectivity carries it on clusters whose nodes the API server can't reach."""
    config = {
        "apiVersion": "apiserver.k8s.io/v1beta1",
        "kind": "EgressSelectorConfiguration",
        "egressSelections": [
            {
                "name": "cluster",
                "connection": {
                    "proxyProtocol": "HTTPConnect",
                    "transport": {"uds": {"udsName": str(socket)}},
                },
            }
        ],
    }
    path = home / "egress-selector.yaml"
    path.write_text(json.dumps(config))
    return path


# The controller manager's flex volume directory, in the plane's home: its default, under
# /usr/libexec/kubernetes, is one it creates on the host.
FLEX_VOLUME_DIR = "flexvolume"


def _controller_args(files: dict[str, Path], home: Path) -> list[str]:
    return [
        f"--flex-volume-plugin-dir={home / FLEX_VOLUME_DIR}",
        f"--service-account-private-key-file={files['sa.key']}",
        f"--root-ca-file={files['ca.crt']}",
        f"--cluster-signing-cert-file={files['ca.crt']}",
        f"--cluster-signing-key-file={files['ca.key']}",
        "--use-service-account-credentials=true",
        *(f"--{flag}={value}" for flag, value in NODE_MONITOR.items()),
    ]


def _common_args() -> list[str]:
    return ["--leader-elect=false", f"--bind-address={LOOPBACK}", f"--secure-port={free_port()}"]
