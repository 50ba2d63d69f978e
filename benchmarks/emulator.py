"""How fast the API emulator answers the official client, and how soon watches see writes.

Run: .venv/bin/python benchmarks/emulator.py [--seconds 2]
Prints requests per second for get, list (1,000 pods, label selector matching half) and
merge patch through the official `kubernetes` client, and the latency from a store write
to a watcher seeing the event over HTTP (median and 95th percentile).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client, config, watch  # noqa: E402

from labs.sim.apiserver import ApiServer  # noqa: E402

POD_COUNT = 1000


def rate(operation: Callable[[], object], seconds: float) -> float:
    """Calls per second of `operation`, run back to back for about `seconds`."""
    calls, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        operation()
        calls += 1
    return calls / elapsed


def seed_pods(server: ApiServer) -> None:
    for index in range(POD_COUNT):
        server.store.create(
            "pods",
            {
                "metadata": {
                    "name": f"pod-{index:04d}",
                    "labels": {"app": "gpu" if index % 2 else "cpu", "index": str(index)},
                },
                "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            },
        )


def watch_latencies(server: ApiServer, api_client: client.ApiClient, samples: int) -> list[float]:
    """Seconds from `store.update` returning to the client's watch yielding the change."""
    core = client.CoreV1Api(api_client)
    server.store.create("configmaps", {"metadata": {"name": "beacon"}, "data": {"n": "0"}})
    written: dict[str, float] = {}
    latencies: list[float] = []
    ready = threading.Event()
    stream = watch.Watch()

    def consume() -> None:
        for event in stream.stream(
            core.list_namespaced_config_map, "default", field_selector="metadata.name=beacon"
        ):
            ready.set()
            value = event["object"].data["n"]
            if value in written:
                latencies.append(time.perf_counter() - written[value])
            if len(latencies) == samples:
                stream.stop()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    ready.wait(timeout=10)
    for sample in range(1, samples + 1):
        value = str(sample)
        written[value] = time.perf_counter()
        server.store.update("configmaps", "beacon", lambda cm, v=value: cm["data"].update(n=v))
        deadline = time.monotonic() + 5
        while len(latencies) < sample and time.monotonic() < deadline:
            time.sleep(0.0005)
    consumer.join(timeout=10)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    parser.add_argument("--samples", type=int, default=200, help="watch latency samples")
    options = parser.parse_args()
    with ApiServer() as server, tempfile.TemporaryDirectory() as scratch:
        seed_pods(server)
        kubeconfig = server.write_kubeconfig(Path(scratch) / "kubeconfig")
        api_client = config.new_client_from_config(config_file=str(kubeconfig))
        core = client.CoreV1Api(api_client)
        counter = iter(range(10**9))
        figures = {
            "get pod": rate(
                lambda: core.read_namespaced_pod("pod-0001", "default"), options.seconds
            ),
            f"list {POD_COUNT} pods, label selector (500 match)": rate(
                lambda: core.list_namespaced_pod("default", label_selector="app=gpu"),
                options.seconds,
            ),
            "merge patch pod": rate(
                lambda: core.patch_namespaced_pod(
                    "pod-0002",
                    "default",
                    {"metadata": {"annotations": {"bench": str(next(counter))}}},
                ),
                options.seconds,
            ),
        }
        print(f"API emulator at {server.url}, official kubernetes client, one thread")
        for name, per_second in figures.items():
            print(f"  {name:<45} {per_second:8.1f} requests/s")
        latencies = sorted(watch_latencies(server, api_client, options.samples))
        if latencies:
            median = statistics.median(latencies) * 1000
            p95 = latencies[int(len(latencies) * 0.95) - 1] * 1000
            print(
                f"  store write -> client watch event            median {median:.2f} ms, "
                f"p95 {p95:.2f} ms ({len(latencies)} samples)"
            )
        api_client.close()


if __name__ == "__main__":
    main()
