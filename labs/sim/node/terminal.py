"""A process's standard streams as the terminal of a `kubectl exec`/`attach` session, for the
programs that read a line and answer it, whoever runs the container (a real kubelet's runtime
or the played node's streams)."""

from __future__ import annotations

import os


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
