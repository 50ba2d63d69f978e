"""`pods/exec` and `pods/attach` over WebSocket, the protocol kubectl 1.30+ tries first.

kubectl 1.32 (found with `kubectl exec -v=8` against the emulator) sends
`GET .../exec?command=...&stdin=..&stdout=..&stderr=..&tty=..` with `Upgrade: websocket`
and `Sec-WebSocket-Protocol: v5.channel.k8s.io`, and falls back to SPDY (`POST` with
`X-Stream-Protocol-Version`) only when the upgrade fails. This module speaks the WebSocket
channel protocol (v5, and v4 for the Python client): every binary message starts with its
channel - 0 stdin, 1 stdout, 2 stderr, 3 error (the exit status as a `Status`), 4 terminal
resize, 255 close (v5: the client closed its stdin). The server first sends an empty
message on the lowest channel it will write, as kubelet does; at the end the error channel
carries `Success`, or `NonZeroExitCode` with the code, which kubectl turns into its own
exit status. The handshake and framing are the `websockets` library's (sans-I/O).

`-t` is served without a real terminal: with `tty=true` output lines end in CRLF, stderr
goes to stdout, and typed characters are echoed back with backspace, Ctrl-C and Ctrl-D
handled line by line (kubectl has put the local terminal in raw mode). Window sizes
(channel 4) are read and ignored.
"""

from __future__ import annotations

import json
import queue
import socket
import threading
from collections.abc import Callable
from io import BufferedIOBase
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from websockets.frames import Frame, Opcode
from websockets.http11 import Request
from websockets.protocol import State
from websockets.server import ServerProtocol
from websockets.typing import Subprotocol

from labs.sim.programs import Process, Terminal
from labs.sim.store import BadRequest

SUBRESOURCES = ("exec", "attach")
SUBPROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
CLOSE_GRACE_SECONDS = 1.0


class StreamRuntime(Protocol):
    """The kubelet side: checks a container and runs processes in it."""

    def check(self, namespace: str, name: str, container: str | None) -> Process: ...

    def exec(self, process: Process, command: list[str], term: Terminal) -> int: ...

    def attach(self, process: Process, term: Terminal, gone: Callable[[], bool]) -> None: ...


class Session:
    """One WebSocket stream as the process's terminal."""

    def __init__(self, sock: socket.socket, rfile: BufferedIOBase, protocol: ServerProtocol,
                 options: dict[str, bool]) -> None:  # fmt: skip
        self.tty = options["tty"]
        self._sock = sock
        self._rfile = rfile
        self._protocol = protocol
        self._options = options
        self._lock = threading.Lock()
        self._input: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._pending = b""
        self.closed = threading.Event()
        threading.Thread(target=self._read, name="exec-stream-reader", daemon=True).start()

    # ---- writing ---------------------------------------------------------------------

    def send(self, channel: int, data: bytes) -> None:
        with self._lock:
            if self.closed.is_set():
                return
            self._protocol.send_binary(bytes([channel]) + data)
            self._flush()

    def _flush(self) -> None:
        try:
            self._sock.sendall(b"".join(self._protocol.data_to_send()))
        except OSError:
            self.closed.set()

    def out(self, text: str) -> None:
        if self._options["stdout"]:
            self.send(STDOUT, self._terminal_text(text))

    def out_bytes(self, data: bytes) -> None:
        if self._options["stdout"]:
            self.send(STDOUT, data)

    def err(self, text: str) -> None:
        if self._options["stderr"] and not self.tty:
            self.send(STDERR, text.encode())
        else:
            self.out(text)

    def _terminal_text(self, text: str) -> bytes:
        return (text.replace("\n", "\r\n") if self.tty else text).encode()

    def finish(self, status: dict) -> None:
        """Send the exit status, close the WebSocket and give the client a moment to answer."""
        self.send(ERROR, json.dumps(status).encode())
        with self._lock:
            self._protocol.send_close(1000)
            self._flush()
        self.closed.wait(CLOSE_GRACE_SECONDS)

    # ---- reading ---------------------------------------------------------------------

    def _read(self) -> None:
        while not self.closed.is_set():
            try:
                data = self._rfile.read1(65536)
            except (OSError, ValueError):
                data = b""
            with self._lock:
                if data:
                    self._protocol.receive_data(data)
                else:
                    self._protocol.receive_eof()
                events = self._protocol.events_received()
                self._flush()  # pongs and the closing handshake
            for frame in events:
                if isinstance(frame, Frame) and frame.opcode is Opcode.BINARY and frame.data:
                    self._channel(frame.data[0], bytes(frame.data[1:]))
            if not data or self._protocol.state is State.CLOSED:
                self._input.put(None)
                self.closed.set()

    def _channel(self, channel: int, data: bytes) -> None:
        if channel == STDIN and data:
            self._input.put(data)
        elif channel == CLOSE and data[:1] == bytes([STDIN]):
            self._input.put(None)

    def gone(self) -> bool:
        return self.closed.is_set()

    def read_bytes(self) -> bytes:
        data, self._pending = self._pending, b""
        while (chunk := self._input.get()) is not None:
            data += chunk
        self._input.put(None)  # end of input stays the end
        return data

    def read_line(self, prompt: str) -> str | None:
        """A line of input; on a terminal, echoed as typed (the remote end echoes in raw mode)."""
        if prompt:
            self.out(prompt)
        line = b""
        while True:
            if not self._pending:
                chunk = self._input.get()
                if chunk is None:
                    self._input.put(None)  # end of input stays the end
                    return line.decode(errors="replace") if line else None
                self._pending = chunk
            byte, self._pending = self._pending[:1], self._pending[1:]
            if not self.tty:
                if byte == b"\n":
                    return line.decode(errors="replace")
                line += byte
                continue
            if byte in (b"\r", b"\n"):
                self.send(STDOUT, b"\r\n")
                return line.decode(errors="replace")
            if byte in (b"\x7f", b"\x08"):
                if line:
                    line = line[:-1]
                    self.send(STDOUT, b"\b \b")
            elif byte == b"\x03":
                self.send(STDOUT, b"^C\r\n")
                return ""
            elif byte == b"\x04" and not line:
                return None
            elif byte >= b" ":
                line += byte
                self.send(STDOUT, byte)


def _options(query: dict[str, list[str]]) -> dict[str, bool]:
    def flag(name: str) -> bool:
        return query.get(name, ["false"])[-1].lower() in ("true", "1")

    return {name: flag(name) for name in ("stdin", "stdout", "stderr", "tty")}


def exit_status(code: int, command: list[str]) -> dict[str, Any]:
    """The error channel's last word: Success, or the exit code kubectl exits with."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": (
            f"command terminated with non-zero exit code: error executing command "
            f"[{' '.join(command)}], exit code {code}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def serve(
    path: str,
    headers: list[tuple[str, str]],
    sock: socket.socket,
    rfile: BufferedIOBase,
    runtime: StreamRuntime,
    target: tuple[str, str, str],
) -> None:
    """Run one exec or attach stream (`target`: namespace, pod, subresource) to its end.

    Errors found before the upgrade (no such container, not running, not a WebSocket
    request) raise a StoreError, which the caller answers with a Status.
    """
    namespace, name, subresource = target
    query = parse_qs(urlsplit(path).query)
    command = query.get("command", [])
    process = runtime.check(namespace, name, query.get("container", [None])[-1])
    if subresource == "exec" and not command:
        raise BadRequest("you must specify at least 1 command")
    upgrade = any(k.lower() == "upgrade" and v.lower() == "websocket" for k, v in headers)
    if not upgrade:
        raise BadRequest(
            f"the API emulator streams {subresource} over WebSocket ({SUBPROTOCOLS[0]}) only, "
            "not SPDY: use kubectl 1.30 or newer"
        )
    protocol = ServerProtocol(subprotocols=[Subprotocol(p) for p in SUBPROTOCOLS])
    # The HTTP server has parsed the request; the protocol reads it again from its bytes, so
    # that it expects frames next.
    lines = [f"GET {path} HTTP/1.1", *(f"{key}: {value}" for key, value in headers)]
    protocol.receive_data(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    request = next(e for e in protocol.events_received() if isinstance(e, Request))
    response = protocol.accept(request)
    protocol.send_response(response)
    sock.sendall(b"".join(protocol.data_to_send()))
    if response.status_code != 101:
        return
    options = _options(query)
    session = Session(sock, rfile, protocol, options)
    first = STDOUT if options["stdout"] else STDERR if options["stderr"] else ERROR
    session.send(first, b"")
    if subresource == "exec":
        session.finish(exit_status(runtime.exec(process, command, session), command))
    else:  # attach reports that the stream ended well, not the process's exit code
        runtime.attach(process, session, session.gone)
        session.finish(exit_status(0, command))
