"""The node endpoint behind every simulated node: real kubectl, through the real API server, to
the kubelet's own streaming code, and what a user sees from `logs`, `exec`, `attach` and
`port-forward`."""

from __future__ import annotations

import json
import queue
import re
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import pytest
from controlplane_support import Heartbeats, kubectl_on, processes, running_control_plane
from tool_support import require_tool

from labs.sim.controlplane import build, pki
from labs.sim.controlplane.node_endpoint import NodeEndpoint
from labs.sim.controlplane.run import ControlPlane

NAMESPACE = "default"
NODE = "gpu-node-1"
POD = "trainer"
READY_TIMEOUT = 30.0
# Timestamps whose nanoseconds end in a non-zero digit print exactly as written.
FIRST = "2026-01-02T03:04:05.123456789Z"
SECOND = "2026-01-02T03:04:06.987654321Z"

# The exec command: says what it was asked to run, echoes its stdin, exits as told.
EXEC_SCRIPT = """
import json, sys, time
verb, namespace, pod, container, *rest = sys.argv[1:]
if verb == "attach":
    print(f"attached to {namespace}/{pod}/{container}", flush=True)
    for line in sys.stdin:
        print(f"attach got: {line.strip()}", flush=True)
    sys.exit(0)
command = rest[rest.index("--") + 1:]
print(f"exec in {namespace}/{pod}/{container}: {json.dumps(command)}", flush=True)
if command[0] == "sleep":
    time.sleep(float(command[1]))
data = sys.stdin.read()
if data:
    print(f"stdin: {data.strip()}", flush=True)
print("to stderr", file=sys.stderr, flush=True)
sys.exit(int(command[1]) if command[0] == "exit" else 0)
"""


@dataclass
class Lab:
    plane: ControlPlane
    endpoint: NodeEndpoint
    logs: Path
    ports: Path
    script: Path
    cache: Path

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return kubectl_on(self.plane.admin_kubeconfig, self.cache, *args, stdin=stdin)

    def kubectl_background(self, *args: str) -> subprocess.Popen[str]:
        config = ["--kubeconfig", str(self.plane.admin_kubeconfig), "--cache-dir", str(self.cache)]
        return subprocess.Popen(
            [require_tool("kubectl"), *config, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _until_ok(run: partial[subprocess.CompletedProcess], what: str) -> None:
    """Retry a create the controllers may not be ready for (the default service account)."""
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        done = run()
        if done.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: {done.stderr}")
        time.sleep(0.5)


def _node_and_pod(lab: Lab, node: str, pod: str, port: int) -> None:
    """A simulated node whose kubelet is the endpoint, and a Running pod bound to it."""
    created = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}
    assert lab.kubectl("create", "-f", "-", stdin=json.dumps(created)).returncode == 0
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "simulated"}
    status = {
        "conditions": [{**ready, "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}],
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
    }
    patch = json.dumps({"status": status})
    patched = lab.kubectl(
        "patch", "node", node, "--subresource=status", "--type=merge", "-p", patch
    )
    assert patched.returncode == 0, patched.stderr
    containers = [{"name": name, "image": "busybox"} for name in ("main", "sidecar")]
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod, "namespace": NAMESPACE},
        "spec": {"nodeName": node, "containers": containers},
    }
    _until_ok(partial(lab.kubectl, "create", "-f", "-", stdin=json.dumps(manifest)), "create pod")
    running = json.dumps({"status": {"phase": "Running"}})
    patched = lab.kubectl(
        "patch", "pod", pod, "--subresource=status", "--type=merge", "-p", running
    )
    assert patched.returncode == 0, patched.stderr


ROUTED = "10.100.7.7"  # a Service's virtual address, routed to the echo server


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture(scope="module")
def echo_server() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, echo_server: int) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("node-endpoint")
    logs, ports = root / "logs", root / "ports"
    script = root / "exec_command.py"
    script.write_text(EXEC_SCRIPT)
    pod_logs = logs / f"{NAMESPACE}_{POD}"
    pod_logs.mkdir(parents=True)
    (pod_logs / "main.log").write_text(
        f"{FIRST} stdout F first line\n{SECOND} stderr F second line\n"
    )
    (ports / f"{NAMESPACE}_{POD}").mkdir(parents=True)
    (ports / f"{NAMESPACE}_{POD}" / "8080").write_text(f"127.0.0.1:{echo_server}\n")
    routes = root / "routes"
    routes.mkdir()
    (routes / f"{ROUTED}_443").write_text(f"127.0.0.1:{echo_server}\n")
    with running_control_plane(root / "plane") as plane:
        assert plane.ca is not None
        endpoint = NodeEndpoint(
            plane.home, plane.ca, [sys.executable, str(script)], logs, ports,
            routes_dir=routes, connect_tcp=True,
        )  # fmt: skip
        port = endpoint.start()
        try:
            lab = Lab(plane, endpoint, logs, ports, script, root / "kubectl-cache")
            with Heartbeats(plane.admin_kubeconfig, [NODE]):
                _node_and_pod(lab, NODE, POD, port)
                yield lab
        finally:
            endpoint.stop()


def _lines_of(process: subprocess.Popen[str]) -> queue.Queue[str]:
    """A background process's stdout, line by line, readable with a timeout."""
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return lines


# --- logs --------------------------------------------------------------------------------------


def test_kubectl_logs_reads_the_cri_log_file(lab: Lab) -> None:
    shown = lab.kubectl("logs", POD, "-c", "main")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == "first line\nsecond line\n"


def test_kubectl_logs_tail_and_timestamps(lab: Lab) -> None:
    assert lab.kubectl("logs", POD, "-c", "main", "--tail=1").stdout == "second line\n"
    stamped = lab.kubectl("logs", POD, "-c", "main", "--timestamps").stdout
    assert stamped == f"{FIRST} first line\n{SECOND} second line\n"
    assert lab.kubectl("logs", POD, "-c", "main", "--limit-bytes=8").stdout == "first li"
    since = lab.kubectl("logs", POD, "-c", "main", "--since-time=2026-01-02T03:04:06Z").stdout
    assert since == "second line\n"


def test_kubectl_logs_follow_receives_a_line_appended_after_it_started(lab: Lab) -> None:
    main = lab.logs / f"{NAMESPACE}_{POD}" / "main.log"
    original = main.read_text()
    following = lab.kubectl_background("logs", "-f", POD, "-c", "main", "--tail=1")
    try:
        lines = _lines_of(following)
        assert lines.get(timeout=READY_TIMEOUT) == "second line"
        with main.open("a") as appended:
            appended.write(f"{_now()} stdout F appended while following\n")
        assert lines.get(timeout=READY_TIMEOUT) == "appended while following"
    finally:
        following.terminate()
        following.wait()
        main.write_text(original)


def test_a_missing_log_file_is_the_kubelets_error_naming_the_file(lab: Lab) -> None:
    shown = lab.kubectl("logs", POD, "-c", "sidecar")
    assert shown.returncode != 0
    path = lab.logs / f"{NAMESPACE}_{POD}" / "sidecar.log"
    assert f'failed to try resolving symlinks in path "{path}"' in shown.stderr
    assert "no such file or directory" in shown.stderr


def test_previous_logs_say_there_is_no_previous_container(lab: Lab) -> None:
    shown = lab.kubectl("logs", POD, "-c", "main", "--previous")
    assert shown.returncode != 0
    assert f'previous terminated container "main" in pod "{POD}" not found' in shown.stderr


# --- exec and attach -------------------------------------------------------------------------


def test_kubectl_exec_runs_the_exec_command_and_returns_its_output(lab: Lab) -> None:
    done = lab.kubectl("exec", POD, "-c", "main", "--", "nvidia-smi", "-L")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f'exec in {NAMESPACE}/{POD}/main: ["nvidia-smi", "-L"]\n'
    assert "to stderr" in done.stderr


def test_kubectl_exec_exits_with_the_commands_exit_code(lab: Lab) -> None:
    done = lab.kubectl("exec", POD, "-c", "main", "--", "exit", "3")
    assert done.returncode == 3
    assert "command terminated with exit code 3" in done.stderr


def test_kubectl_exec_i_passes_stdin(lab: Lab) -> None:
    done = lab.kubectl("exec", "-i", POD, "-c", "main", "--", "cat", stdin="hello from stdin\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f'exec in {NAMESPACE}/{POD}/main: ["cat"]',
        "stdin: hello from stdin",
    ]


def test_kubectl_attach_runs_the_attach_command(lab: Lab) -> None:
    done = lab.kubectl("attach", "-i", POD, "-c", "main", stdin="one\ntwo\n")
    assert done.returncode == 0, done.stderr
    assert f"attached to {NAMESPACE}/{POD}/main" in done.stdout
    assert "attach got: one" in done.stdout and "attach got: two" in done.stdout


# --- port-forward ----------------------------------------------------------------------------


def _connect_through(forwarding: subprocess.Popen[str], port: int) -> socket.socket:
    """A connection to the local port `kubectl port-forward` says it forwards to `port`."""
    first = _lines_of(forwarding).get(timeout=READY_TIMEOUT)
    found = re.match(rf"Forwarding from 127\.0\.0\.1:(\d+) -> {port}", first)
    assert found, first
    return socket.create_connection(("127.0.0.1", int(found.group(1))), timeout=10)


def test_kubectl_port_forward_reaches_the_address_in_the_ports_dir(lab: Lab) -> None:
    forwarding = lab.kubectl_background("port-forward", f"pod/{POD}", ":8080")
    try:
        with _connect_through(forwarding, 8080) as conn:
            conn.sendall(b"ping through the kubelet\n")
            received = b""
            while not received.endswith(b"\n"):
                received += conn.recv(4096)
        assert received == b"ping through the kubelet\n"
    finally:
        forwarding.terminate()
        forwarding.wait()


def test_a_port_the_pod_does_not_listen_on_is_the_kubelets_stream_error(lab: Lab) -> None:
    forwarding = lab.kubectl_background("port-forward", f"pod/{POD}", ":9090")
    try:
        with _connect_through(forwarding, 9090) as conn:
            conn.sendall(b"anyone there?\n")
            assert conn.recv(4096) == b""  # closed, nothing answered
    finally:
        forwarding.terminate()
        forwarding.wait(timeout=READY_TIMEOUT)
    assert forwarding.stderr is not None
    stderr = forwarding.stderr.read()
    assert f"error forwarding port 9090 to pod {POD}" in stderr
    assert "failed to connect to localhost:9090" in stderr


# --- who may talk to it ----------------------------------------------------------------------


def test_a_client_without_a_certificate_of_the_lab_ca_is_refused(lab: Lab) -> None:
    url = f"{lab.endpoint.url}/containerLogs/{NAMESPACE}/{POD}/main"
    assert lab.plane.ca is not None
    trusting = ssl.create_default_context(cadata=lab.plane.ca.cert_pem)
    with pytest.raises(urllib.error.HTTPError) as anonymous:
        urllib.request.urlopen(url, context=trusting, timeout=10)
    assert anonymous.value.code == 401
    stranger = pki.Authority.new().issue("kube-apiserver-kubelet-client", "system:masters")
    cert = pki.write_private(lab.plane.home / "stranger.crt", stranger.cert_pem)
    key = pki.write_private(lab.plane.home / "stranger.key", stranger.key_pem)
    trusting.load_cert_chain(cert, key)
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(url, context=trusting, timeout=10).read()


def test_healthz_answers_and_unknown_paths_are_404(lab: Lab) -> None:
    assert lab.plane.ca is not None
    trusting = ssl.create_default_context(cadata=lab.plane.ca.cert_pem)
    with urllib.request.urlopen(f"{lab.endpoint.url}/healthz", context=trusting) as answer:
        assert answer.read() == b"ok"
    client = lab.plane.home / "pki"
    trusting.load_cert_chain(
        client / "apiserver-kubelet-client.crt", client / "apiserver-kubelet-client.key"
    )
    with pytest.raises(urllib.error.HTTPError) as unknown:
        urllib.request.urlopen(f"{lab.endpoint.url}/pods", context=trusting, timeout=10)
    assert unknown.value.code == 404


def test_each_request_is_one_line_of_the_endpoints_log(lab: Lab) -> None:
    lab.kubectl("logs", POD, "-c", "main")
    logged = lab.endpoint.log.read_text()
    assert re.search(
        r"GET /containerLogs/default/trainer/main\S* 200 .* user=kube-apiserver-", logged
    )


# --- lifetime --------------------------------------------------------------------------------


def _processes_naming(marker: str) -> list[str]:
    return processes(lambda argv: any(marker in arg for arg in argv))


def test_no_process_is_left_after_stop_not_even_a_running_exec(lab: Lab, tmp_path: Path) -> None:
    assert lab.plane.ca is not None
    script = tmp_path / "own_exec_command.py"
    script.write_text(EXEC_SCRIPT)
    endpoint = NodeEndpoint(
        tmp_path, lab.plane.ca, [sys.executable, str(script)], lab.logs, lab.ports
    )
    port = endpoint.start()
    try:
        _node_and_pod(lab, "gpu-node-2", "sleeper", port)
        sleeping = lab.kubectl_background("exec", "sleeper", "-c", "main", "--", "sleep", "600")
        deadline = time.monotonic() + READY_TIMEOUT
        while not _processes_naming(str(script)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _processes_naming(str(script)), "the exec command did not start"
    finally:
        endpoint.stop()
    deadline = time.monotonic() + 10
    while _processes_naming(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_naming(str(tmp_path)) == []
    sleeping.wait(timeout=READY_TIMEOUT)
    assert sleeping.returncode != 0
    assert endpoint.pid is None


def _connect(lab: Lab, target: str) -> tuple[str, bytes, socket.socket]:
    """CONNECT `target` through the endpoint's proxy on loopback TCP: the reply's status line,
    what came after its headers, and the connection."""
    conn = socket.create_connection(("127.0.0.1", lab.endpoint.connect_port), timeout=10)
    conn.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    reply = b""
    while b"\r\n\r\n" not in reply:
        reply += conn.recv(4096)
    head, rest = reply.split(b"\r\n\r\n", 1)
    return head.split(b"\r\n")[0].decode(), rest, conn


def test_the_proxy_reaches_a_routed_service_address(lab: Lab) -> None:
    status, _, conn = _connect(lab, f"{ROUTED}:443")
    with conn:
        assert status == "HTTP/1.1 200 Connection established"
        conn.sendall(b"ping")
        assert conn.recv(4) == b"ping"


def test_the_proxy_never_dials_an_address_outside_the_lab(lab: Lab) -> None:
    status, body, conn = _connect(lab, "10.100.9.9:443")
    with conn:
        while b"\n" not in body:
            body += conn.recv(4096)
    assert status == "HTTP/1.1 502 Bad Gateway"
    assert b"no route to 10.100.9.9:443 in the lab's network" in body


def test_the_endpoint_is_cached_by_a_hash_of_its_sources() -> None:
    binary = build.node_endpoint_binary(lambda _line: None)
    assert binary.parent.name == build.source_digest()
    assert binary.parent.parent == build.cache_root() / build.NODE_ENDPOINT
