"""A plain TCP check between two pods: the control that tells a network fault from NCCL's.

`listen PORT` accepts connections until stopped; `connect HOST PORT [TIMEOUT_S]` resolves
HOST, connects once and says how it went (exit 0 connected, 1 timed out or refused, 2 no
such name). Security groups decide new connections between nodes, never within one.
"""

import socket
import sys
import time


def say(text: str) -> None:
    print(f"tcp-check: {text}", flush=True)


def listen(port: int) -> int:
    server = socket.create_server(("0.0.0.0", port))
    say(f"listening on 0.0.0.0:{port}")
    while True:
        peer, address = server.accept()
        say(f"accepted {address[0]}:{address[1]}")
        peer.close()


def connect(host: str, port: int, timeout: float) -> int:
    try:
        ip = socket.gethostbyname(host)
    except OSError as error:
        say(f"cannot resolve {host}: {error}")
        return 2
    say(f"resolved {host} to {ip}")
    started = time.monotonic()
    try:
        with socket.create_connection((ip, port), timeout=timeout):
            say(f"connected to {host}:{port} ({ip}) in {(time.monotonic() - started) * 1e3:.1f} ms")
            return 0
    except TimeoutError:
        say(f"connect to {host}:{port} ({ip}) timed out after {timeout:g} s")
    except OSError as error:
        say(f"connect to {host}:{port} ({ip}) failed: {error.strerror or error}")
    return 1


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "listen":
        return listen(int(argv[1]))
    if len(argv) >= 3 and argv[0] == "connect":
        return connect(argv[1], int(argv[2]), float(argv[3]) if len(argv) > 3 else 10.0)
    say("usage: tcp_check.py listen PORT | connect HOST PORT [TIMEOUT_S]")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
