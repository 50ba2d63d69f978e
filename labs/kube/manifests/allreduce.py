"""NCCL all-reduce between the pods of a torch.distributed job: correct sum, algbw, busbw.

Runs unchanged in the lab's two-pod job (one GPU per pod) and on any host with
RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set. A blocked network makes NCCL retry for over
an hour rather than fail, so the run bounds itself: a short rendezvous/process-group
timeout and a deadline after which it gives up with its own message.
"""

import datetime
import os
import socket
import sys
import threading
import time

import torch
import torch.distributed as dist

SIZE_MIB = int(os.environ.get("ALLREDUCE_MIB", "64"))
ITERATIONS = int(os.environ.get("ALLREDUCE_ITERATIONS", "20"))
RENDEZVOUS_TIMEOUT_S = int(os.environ.get("RENDEZVOUS_TIMEOUT_S", "60"))
DEADLINE_S = int(os.environ.get("ALLREDUCE_DEADLINE_S", "240"))


def say(text: str) -> None:
    print(f"allreduce: {text}", flush=True)


def give_up() -> None:
    say(f"FAIL no result after {DEADLINE_S} s: a blocked NCCL connect retries for far longer")
    os._exit(3)


def rank_of_this_host() -> int:
    """RANK when set, else the number the hostname ends in (`nccl-allreduce-1` is rank 1)."""
    rank = os.environ.get("RANK") or socket.gethostname().rsplit("-", 1)[-1]
    os.environ["RANK"] = rank
    return int(rank)


def main() -> int:
    rank, world = rank_of_this_host(), int(os.environ["WORLD_SIZE"])
    watchdog = threading.Timer(DEADLINE_S, give_up)
    watchdog.daemon = True
    watchdog.start()
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    nccl = ".".join(str(part) for part in torch.cuda.nccl.version())
    say(
        f"rank {rank} of {world} on {socket.gethostname()} ({torch.cuda.get_device_name(0)}), "
        f"torch {torch.__version__}, NCCL {nccl}, "
        f"rendezvous {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    )
    dist.init_process_group(
        "nccl", timeout=datetime.timedelta(seconds=RENDEZVOUS_TIMEOUT_S), device_id=device
    )
    tensor = torch.full((SIZE_MIB * 2**20 // 4,), float(rank + 1), device=device)
    dist.all_reduce(tensor)
    expected = world * (world + 1) / 2
    correct = bool(torch.all(tensor == expected).item())
    say(
        f"{SIZE_MIB} MiB float32, sum {tensor[0].item()} expected {expected}: "
        + ("correct" if correct else "WRONG")
    )
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(ITERATIONS):
        dist.all_reduce(tensor)
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - started) / ITERATIONS
    algbw = SIZE_MIB * 2**20 / seconds / 1e9
    busbw = algbw * 2 * (world - 1) / world
    say(
        f"{ITERATIONS} iterations, {seconds * 1e3:.2f} ms each, "
        f"algbw {algbw:.2f} GB/s, busbw {busbw:.2f} GB/s"
    )
    dist.destroy_process_group()
    say("PASS" if correct else "FAIL wrong sum")
    return 0 if correct else 1


if __name__ == "__main__":
    sys.exit(main())
