"""`python -m labs.sim.node.exec_streams`: one exec or attach stream into a world's container.

The node endpoint (the kubelet API of the simulated nodes) starts this for each stream, its
stdin, stdout and stderr wired to kubectl's, and hands its exit code back as the command's:

    python -m labs.sim.node.exec_streams --api-url URL --pki DIR --logs DIR \\
        exec NAMESPACE POD CONTAINER [--tty] -- COMMAND...
    python -m labs.sim.node.exec_streams ... attach NAMESPACE POD CONTAINER [--tty]

The world's programs (`labs.sim.node.programs`) play the command; they read pods and nodes through
the API server with the world's own credentials.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from labs.kube.api import KubeApi
from labs.kube.resources import KubeApiError
from labs.sim.controlplane.run import Credentials
from labs.sim.node.container_logs import ContainerLogs
from labs.sim.node.container_runtime import ContainerRuntime

NOT_RUNNABLE = 126


class StdioTerminal:
    """The stream as the process's terminal: on a tty, kubectl sends raw keystrokes and the
    remote end echoes and edits the line, as a shell's line discipline would."""

    def __init__(self, tty: bool) -> None:
        self.tty = tty
        self._pending = b""
        self._ended = False

    def out(self, text: str) -> None:
        data = (text.replace("\n", "\r\n") if self.tty else text).encode()
        os.write(1, data)

    def out_bytes(self, data: bytes) -> None:
        while data:
            data = data[os.write(1, data) :]

    def read_bytes(self) -> bytes:
        data = self._pending
        self._pending = b""
        while not self._ended and (chunk := os.read(0, 65536)):
            data += chunk
        self._ended = True
        return data

    def err(self, text: str) -> None:
        if self.tty:
            self.out(text)
        else:
            os.write(2, text.encode())

    def _byte(self) -> bytes | None:
        if not self._pending:
            chunk = b"" if self._ended else os.read(0, 65536)
            if not chunk:
                self._ended = True
                return None
            self._pending = chunk
        byte, self._pending = self._pending[:1], self._pending[1:]
        return byte

    def read_line(self, prompt: str) -> str | None:
        if prompt:
            self.out(prompt)
        line = b""
        while (byte := self._byte()) is not None:
            if not self.tty:
                if byte == b"\n":
                    return line.decode(errors="replace")
                line += byte
            elif byte in (b"\r", b"\n"):
                os.write(1, b"\r\n")
                return line.decode(errors="replace")
            elif byte in (b"\x7f", b"\x08"):
                if line:
                    line = line[:-1]
                    os.write(1, b"\b \b")
            elif byte == b"\x03":
                os.write(1, b"^C\r\n")
                return ""
            elif byte == b"\x04" and not line:
                return None
            elif byte >= b" ":
                line += byte
                os.write(1, byte)
        return line.decode(errors="replace") if line else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m labs.sim.node.exec_streams", description=__doc__
    )
    parser.add_argument("--api-url", required=True)
    parser.add_argument("--pki", type=Path, required=True, help="the control plane's pki dir")
    parser.add_argument("--logs", type=Path, required=True, help="the containers' log root")
    parser.add_argument("stream", choices=("exec", "attach"))
    parser.add_argument("namespace")
    parser.add_argument("pod")
    parser.add_argument("container")
    parser.add_argument("--tty", action="store_true")
    parser.add_argument("command", nargs="*")
    args = parser.parse_args(argv)
    credentials = Credentials(
        args.api_url, args.pki / "ca.crt", args.pki / "admin.crt", args.pki / "admin.key"
    )
    runtime = ContainerRuntime(KubeApi(credentials.api_client()), ContainerLogs(args.logs))
    term = StdioTerminal(args.tty)
    try:
        process = runtime.check(args.namespace, args.pod, args.container)
    except KubeApiError as error:
        print(error.message, file=sys.stderr)
        return NOT_RUNNABLE
    if args.stream == "exec":
        return runtime.exec(process, args.command, term)
    runtime.attach(process, term, gone=lambda: False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
