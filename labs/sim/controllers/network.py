"""The pod network between nodes, gated by the security-group rules in moto.

Two workloads of the lab talk across nodes, and their programs here print what the real
ones printed on real GPUs and a real blocked network (the NCCL, c10d and TCP lines are
the recorded ones, with this world's names, IPs and times):
- `tcp_check.py connect HOST PORT [TIMEOUT_S]`: connects, times out, or is refused;
- `allreduce.py`: the two-pod NCCL all-reduce: rendezvous on MASTER_ADDR:MASTER_PORT, then
  NCCL's own connects on an ephemeral port, then the timed all-reduce.
A connection is decided when the program starts: security groups are stateful, so one
made before a rule went away lives on. Pods on one node never cross a security group;
between nodes a TCP port is open when either the auxiliary SG allows all traffic from the
VPC CIDR, or the node SG's self rule covers the port (both SGs are on every GPU node).
"""

from __future__ import annotations

import functools
import ipaddress
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from labs.kube.api import KubeApi
from labs.kube.resources import NODES, PODS, SERVICES, NotFound
from labs.sim.aws.seed import VPC_CIDR, aux_sg_name, node_sg_name
from labs.sim.node.hardware import GPU_NAME
from labs.sim.node.nvidia_runtime import container_env, injected_gpus
from labs.sim.timings import Timings

# A rendezvous waits at least this many wall seconds, whatever the speed: a peer pod's
# start takes the world's controllers a few milliseconds of real time at any speed.
MIN_WAIT = 1.0
NCCL_PORT = 56153  # the ephemeral port NCCL's bootstrap connected to in the recording
SIMULATED_BUSBW_GBPS = 0.74  # g5.xlarge pair over TCP: ~60 % of a 10 Gbps burst
CLIENT_WARNING = "[c10d] The hostname of the client socket cannot be retrieved. err=-3"
TORCH, NCCL = "2.11.0+cu130", "2.28.9"


@dataclass(frozen=True)
class Outcome:
    """What a container printed, its exit code, and how long it took (wall seconds).

    `again`: not decided yet (a program waiting for its peers): run it again after `duration`.
    """

    log: str
    exit_code: int
    duration: float
    again: bool = False


class PodProgram(Protocol):
    """What a container of a pod does, decided from the whole pod (its peers, the network)."""

    def matches(self, pod: dict) -> bool: ...

    def run(self, pod: dict, node: dict, timings: Timings) -> Outcome: ...


def command_text(pod: dict) -> str:
    """All containers' command and args as one string, for deciding what they do."""
    parts: list[str] = []
    for container in pod["spec"].get("containers") or []:
        parts += [str(x) for x in (container.get("command") or []) + (container.get("args") or [])]
    return " ".join(parts)


class SecurityGroups:
    """Answers "may node A reach node B on this TCP port?" from moto's rules."""

    def __init__(self, clients: Callable[[str], Any], cluster: str) -> None:
        self._ec2 = functools.cache(lambda: clients("ec2"))  # made when first asked
        self._names = (node_sg_name(cluster), aux_sg_name(cluster))

    def allows_node_to_node(self, port: int) -> bool:
        groups = self._ec2().describe_security_groups(
            Filters=[{"Name": "group-name", "Values": list(self._names)}]
        )["SecurityGroups"]
        ids = {g["GroupId"] for g in groups}
        rules = self._ec2().describe_security_group_rules(
            Filters=[{"Name": "group-id", "Values": sorted(ids)}]
        )["SecurityGroupRules"]
        return any(_admits(rule, port, ids) for rule in rules if not rule["IsEgress"])


def _admits(rule: dict, port: int, member_of: set[str]) -> bool:
    protocol = rule["IpProtocol"]
    if protocol not in ("-1", "tcp", "6"):
        return False
    if protocol != "-1" and not rule["FromPort"] <= port <= rule["ToPort"]:
        return False
    source_group = (rule.get("ReferencedGroupInfo") or {}).get("GroupId")
    if source_group:
        return source_group in member_of
    cidr = rule.get("CidrIpv4")
    if not cidr:
        return False
    return ipaddress.IPv4Network(VPC_CIDR).subnet_of(ipaddress.IPv4Network(cidr))


class Network:
    """Cluster DNS and reachability between pods, read from the store and moto."""

    def __init__(
        self,
        store: KubeApi,
        groups: SecurityGroups,
        expected_ip: Callable[[dict, dict], str] | None = None,
    ) -> None:
        """`expected_ip(node, pod)`: the address a node's kubelet will give a pod, where it is
        known before the pod runs (the played kubelet's); otherwise a pod has an IP once its
        kubelet reported the one its runtime gave."""
        self.store = store
        self._groups = groups
        self._expected_ip = expected_ip

    def resolve(self, name: str, namespace: str) -> dict | None:
        """The pod a name points at: a pod IP, or `<hostname>.<subdomain>[.<ns>[.svc...]]`
        of a pod whose subdomain is a headless Service (as cluster DNS answers it)."""
        if re.fullmatch(r"[0-9.]+", name):
            pods = self.store.list(PODS, namespace=None)[0]
            return next((p for p in pods if (p.get("status") or {}).get("podIP") == name), None)
        parts = name.removesuffix(".cluster.local").removesuffix(".svc").split(".")
        if len(parts) not in (2, 3):
            return None
        host, subdomain, ns = parts[0], parts[1], parts[2] if len(parts) == 3 else namespace
        try:
            self.store.get(SERVICES, subdomain, ns)
        except NotFound:
            return None
        return next(
            (
                p
                for p in self.store.list(PODS, namespace=ns)[0]
                if p["spec"].get("hostname") == host and p["spec"].get("subdomain") == subdomain
            ),
            None,
        )

    def ip_of(self, pod: dict) -> str | None:
        """The pod's IP, or the one its kubelet will give it where that is known."""
        ip = (pod.get("status") or {}).get("podIP")
        node = pod["spec"].get("nodeName")
        if ip or not node or self._expected_ip is None:
            return ip
        try:
            return self._expected_ip(self.store.get(NODES, node), pod)
        except NotFound:
            return None

    def reachable(self, port: int) -> Callable[[str, dict], bool]:
        """Whether a new TCP connection from a node to a target pod on `port` gets through, as
        the rules stand now (read from moto once, and only for a pair on two nodes)."""
        crossing = functools.cache(lambda: self._groups.allows_node_to_node(port))

        def to(source_node: str, target: dict) -> bool:
            return target["spec"].get("nodeName") == source_node or crossing()

        return to


def _lines(*lines: str) -> str:
    return "".join(f"{line}\n" for line in lines)


class TcpCheck:
    """`tcp_check.py connect HOST PORT [TIMEOUT_S]` as the real script prints it."""

    _CALL = re.compile(r"tcp_check\.py connect (\S+) (\d+)(?: ([0-9.]+))?")

    def __init__(self, network: Network) -> None:
        self._net = network

    def matches(self, pod: dict) -> bool:
        return bool(self._CALL.search(command_text(pod)))

    def run(self, pod: dict, node: dict, timings: Timings) -> Outcome:
        found = self._CALL.search(command_text(pod))
        assert found is not None  # matches() said so
        host, port, timeout = found[1], int(found[2]), float(found[3] or 10)
        quick = timings.container_run
        target = self._net.resolve(host, pod["metadata"]["namespace"])
        ip = self._net.ip_of(target) if target else None
        if target is None or ip is None:
            say = f"tcp-check: cannot resolve {host}: [Errno -2] Name or service not known"
            return Outcome(_lines(say), 2, quick)
        where = f"{host}:{port} ({ip})"
        resolved = f"tcp-check: resolved {host} to {ip}"
        if not _listens(target, port):
            failed = f"tcp-check: connect to {where} failed: Connection refused"
            return Outcome(_lines(resolved, failed), 1, quick)
        if self._net.reachable(port)(node["metadata"]["name"], target):
            ms = 0.2 if target["spec"].get("nodeName") == node["metadata"]["name"] else 0.5
            return Outcome(
                _lines(resolved, f"tcp-check: connected to {where} in {ms} ms"), 0, quick
            )
        timed_out = f"tcp-check: connect to {where} timed out after {timeout:g} s"
        return Outcome(_lines(resolved, timed_out), 1, timeout / timings.speed)


def _listens(pod: dict, port: int) -> bool:
    running = (pod.get("status") or {}).get("phase") in ("Running", None, "Pending")
    return running and f"tcp_check.py listen {port}" in command_text(pod)


class AllReduce:
    """`allreduce.py` on each rank of a two-pod job, as PyTorch 2.11 and NCCL 2.28.9 print it."""

    def __init__(self, network: Network) -> None:
        self._net = network
        self._waiting_since: dict[str, float] = {}  # pod uid -> when its rendezvous began

    def matches(self, pod: dict) -> bool:
        return "allreduce.py" in command_text(pod)

    def run(self, pod: dict, node: dict, timings: Timings) -> Outcome:
        env = container_env(pod)
        me = _Rank(pod, env, self._net.ip_of(pod) or "0.0.0.0")
        if not injected_gpus(pod, node):
            return Outcome(_lines(me.banner(), *_NO_GPU), 1, timings.container_run)
        lines = [me.banner(), me.stamp("W", "socket.cpp:207") + CLIENT_WARNING]
        master = self._net.resolve(me.address, pod["metadata"]["namespace"])
        ranks = [pod, *self._others(pod, me.address)]
        reach = self._net.reachable(me.port)
        joined = [r for r in ranks if master and reach(_node(r), master)]
        uid = pod["metadata"]["uid"]
        wall = time.monotonic() - self._waiting_since.setdefault(uid, time.monotonic())
        waited = wall * timings.speed
        if len(joined) < me.world and (waited < me.timeout or wall < MIN_WAIT):
            # the store waits for its clients (never shorter than the world's own latency)
            return Outcome("", 0, min(1.0 / timings.speed, 0.05), again=True)
        self._waiting_since.pop(uid, None)
        if len(joined) < me.world:  # Python's exit status for the uncaught DistError: 1
            lines += me.rendezvous_failed(joined, self._net.ip_of(master) if master else None)
            seconds, code = (1.0 if me.rank == 0 else 0.0), 1
        elif self._blocked(ranks):  # the script's own deadline: exit 3
            peer = next(r for r in ranks if r is not pod)
            lines += me.nccl_init() + me.nccl_blocked(self._net.ip_of(peer) or "")
            seconds, code = me.deadline, 3
        else:
            lines += me.nccl_init() + me.nccl_connected() + me.result()
            seconds, code = me.busy_seconds(), 0
        return Outcome(_lines(*lines), code, seconds / timings.speed)

    def _others(self, pod: dict, address: str) -> list[dict]:
        """The other pods of the same job (same script, same rendezvous) on a node: about to
        start, running, or done with a run they joined (a failed one never joins)."""
        return [
            p
            for p in self._net.store.list(PODS, namespace=pod["metadata"]["namespace"])[0]
            if p["metadata"]["uid"] != pod["metadata"]["uid"]
            and self.matches(p)
            and container_env(p).get("MASTER_ADDR") == address
            and _node(p)
            and (p.get("status") or {}).get("phase") != "Failed"
        ]

    def _blocked(self, ranks: list[dict]) -> bool:
        """NCCL's own connects (ephemeral ports) fail between some pair of ranks."""
        reach = self._net.reachable(NCCL_PORT)
        return any(not reach(_node(a), b) for a in ranks for b in ranks if a is not b)


def _node(pod: dict) -> str:
    return str(pod["spec"].get("nodeName", ""))


_NO_GPU = ("RuntimeError: Found no NVIDIA driver on your system.",)
_TRACEBACK = ("Traceback (most recent call last):",)  # the frames differ by torch build


class _Rank:
    """One rank's lines, in the recorded formats, with this pod's names and addresses."""

    def __init__(self, pod: dict, env: dict[str, str], ip: str) -> None:
        self.host = pod["spec"].get("hostname") or pod["metadata"]["name"]
        self.rank = int(env.get("RANK") or self.host.rsplit("-", 1)[-1])
        self.world = int(env.get("WORLD_SIZE", "1"))
        self.address, self.port = env.get("MASTER_ADDR", ""), int(env.get("MASTER_PORT", "29500"))
        self.timeout = int(env.get("RENDEZVOUS_TIMEOUT_S", "60"))
        self.deadline = int(env.get("ALLREDUCE_DEADLINE_S", "240"))
        self.mib = int(env.get("ALLREDUCE_MIB", "64"))
        self.iterations = int(env.get("ALLREDUCE_ITERATIONS", "20"))
        self.env, self.ip, self.pid = env, ip, 7 + self.rank
        self.prefix = f"{self.host}:{self.pid}:{self.pid} [0] NCCL INFO "

    def stamp(self, level: str, where: str) -> str:
        now = time.time()
        clock = time.strftime("%m%d %H:%M:%S", time.gmtime(now))
        return f"[{level}{clock}.{int(now % 1 * 1e9):09d} {where}] "

    def banner(self) -> str:
        return (
            f"allreduce: rank {self.rank} of {self.world} on {self.host} ({GPU_NAME}), "
            f"torch {TORCH}, NCCL {NCCL}, rendezvous {self.address}:{self.port}"
        )

    def rendezvous_failed(self, joined: list[dict], master_ip: str | None) -> list[str]:
        """Rank 0 (the store) waits for clients; a client that cannot connect times out."""
        if self.rank == 0 or any(r.get("spec", {}).get("hostname") == self.host for r in joined):
            return [
                *_TRACEBACK,
                f"torch.distributed.DistStoreError: Timed out after {self.timeout + 1} seconds "
                f"waiting for clients. {len(joined)}/{self.world} clients joined.",
            ]
        ms, target = self.timeout * 1000, f"{master_ip or self.address}"
        message = (
            f"The client socket has timed out after {ms}ms while trying to connect to "
            f"({target}, {self.port})."
        )
        return [
            self.stamp("E", "socket.cpp:1028") + f"[c10d] {message}",
            self.stamp("E", "TCPStore.cpp:328") + "[c10d] TCP client failed to connect/validate "
            f"to host {target}:{self.port} - timed out (try=0, timeout={ms}ms): {message}",
            *_TRACEBACK,
            f"torch.distributed.DistNetworkError: {message}",
        ]

    def nccl_init(self) -> list[str]:
        info = self.prefix
        return [
            f"{info}NCCL_SOCKET_IFNAME set by environment to eth0",
            f"{info}Bootstrap: Using eth0:{self.ip}<0>",
            f"{info}NCCL version {NCCL}+cuda13.0",
            f"{info}NCCL_IB_DISABLE set by environment to 1.",
            f"{info}NET/Socket : Using [0]eth0:{self.ip}<0>",
            f"{info}Initialized NET plugin Socket",
            f"{info}Using network Socket",
            f"{info}ncclCommInitRankConfig comm 0x1b362fb0 rank {self.rank} nranks {self.world} "
            "cudaDev 0 nvmlDev 0 busId 1e0 commId 0x46325c44db49a8ad - Init START",
        ]

    def nccl_blocked(self, peer_ip: str) -> list[str]:
        return [
            f"{self.prefix}NCCL_SOCKET_RETRY_CNT set by environment to 1.",
            f"{self.prefix}socketPollConnect: connect to {peer_ip}<{NCCL_PORT}> returned "
            "Connection timed out, retrying (1/1) after sleep for 100 msec",
            f"allreduce: FAIL no result after {self.deadline} s: a blocked NCCL connect retries "
            "for far longer",
        ]

    def nccl_connected(self) -> list[str]:
        info, me, peer = self.prefix, self.rank, 1 - self.rank
        threads = self.env.get("NCCL_SOCKET_NTHREADS", "2")
        socks = self.env.get("NCCL_NSOCKS_PERTHREAD", "8")
        return [
            f"{info}NET/Socket: Using {threads} threads and {socks} sockets per thread",
            f"{info}Channel 00/0 : {peer}[{peer}] -> {me}[{me}] [receive] via NET/Socket/0",
            f"{info}Channel 00/0 : {me}[{me}] -> {peer}[{peer}] [send] via NET/Socket/0",
            f"{info}Connected all rings, use ring PXN 0 GDR 0",
        ]

    def iteration_seconds(self) -> float:
        return self.mib * 2**20 / (SIMULATED_BUSBW_GBPS * 1e9)

    def busy_seconds(self) -> float:
        return self.iteration_seconds() * self.iterations

    def result(self) -> list[str]:
        expected = self.world * (self.world + 1) / 2
        seconds = self.iteration_seconds()
        algbw = self.mib * 2**20 / seconds / 1e9
        busbw = algbw * 2 * (self.world - 1) / self.world
        return [
            f"allreduce: {self.mib} MiB float32, sum {expected} expected {expected}: correct",
            f"allreduce: {self.iterations} iterations, {seconds * 1e3:.2f} ms each, "
            f"algbw {algbw:.2f} GB/s, busbw {busbw:.2f} GB/s",
            f"{self.prefix}comm 0x1b362fb0 rank {self.rank} nranks {self.world} cudaDev 0 "
            "busId 1e0 - Destroy COMPLETE",
            "allreduce: PASS",
        ]
