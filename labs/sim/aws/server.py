"""moto in server mode behind the world's keys: the rehearsal's AWS endpoint on loopback.

moto's own server answers anyone: every local user could read or change the lab, or
`POST /moto-api/reset` it, after which the lab can neither come down nor up again.
moto's only authentication, its IAM emulation (INITIAL_NO_AUTH_ACTION_COUNT), is
process-wide, needs IAM users and policies, and leaves `/moto-api` (dashboard, reset,
reset-auth, seed, state manager, recorder) open. So this WSGI layer in front of moto
checks every request's SigV4 signature against the world's keys and refuses `/moto-api`
outright; the world resets moto in-process instead.

It also says when a write went through (`on_write`), so the controllers that play AWS
(the node groups, the schedules) wait for one instead of polling moto; and it serves the
world's own controls (`controls`, such as its pace) to holders of the world's token.
"""

from __future__ import annotations

import hmac
import io
import json
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import BaseWSGIServer, make_server

from labs.kube.resources import KubeApiError
from labs.sim.aws.auth import Keys, request_time_problem, signed_request_ok
from labs.sim.controlplane.tls import LOOPBACK

REFUSED = (
    "The security token included in the request is invalid: this rehearsal endpoint takes "
    'only its own lab\'s keys (eval "$(invoke lab.env --lab LAB)")'
)
CLOSED_API = "moto's /moto-api is closed on a rehearsal endpoint"
_WRITES = frozenset({"POST", "PUT", "DELETE"})
# Actions that only read, though the query and JSON protocols send every action as a POST.
_READS = ("Describe", "List", "Get")


def _is_write(environ: dict[str, Any], body: bytes) -> bool:
    """Whether the request may change something: a write method, and for the query and JSON
    protocols an action that is not a read (a controller that reads EC2 on a write would
    otherwise wake itself with its own reads, for ever)."""
    if environ["REQUEST_METHOD"] not in _WRITES:
        return False
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        action = target.rsplit(".", 1)[-1]
    else:
        query = parse_qs(body.decode("utf-8", "replace")) if body else {}
        action = (query.get("Action") or parse_qs(environ.get("QUERY_STRING", "")).get("Action")
                  or [""])[0]  # fmt: skip
    return not action.startswith(_READS)


StartResponse = Callable[..., Any]


def reset_moto() -> None:
    """Empty every moto backend of this process (what `POST /moto-api/reset` did).

    Without moto's thousands of public AMIs: the stack registers the images it uses, and
    loading them took 0.6 s a reset and slowed every filtered describe-images."""
    from moto.moto_api import _internal

    os.environ["MOTO_EC2_LOAD_DEFAULT_AMIS"] = "false"

    _internal.moto_api_backend.reset()


class AwsServer:
    """moto on a free loopback port, answering only requests signed with `keys`."""

    def __init__(self, keys: Keys, host: str = LOOPBACK) -> None:
        self.keys = keys
        self._on_write: list[tuple[str, Callable[[], None]]] = []
        # "/path" -> handler(method, JSON body) -> JSON answer; only with `control_token`.
        self.controls: dict[str, Callable[[str, Any], dict]] = {}
        self.control_token = ""
        self._moto = DomainDispatcherApplication(create_backend_app)
        self._server: BaseWSGIServer = make_server(
            host, 0, self._app, threaded=True, request_handler=MotoRequestHandler
        )
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def on_write(self, path_prefix: str, callback: Callable[[], None]) -> None:
        """Call `callback` after each write (POST/PUT/DELETE) to a path under `path_prefix`
        (`/clusters` for EKS, `/schedules` for EventBridge Scheduler)."""
        self._on_write.append((path_prefix, callback))

    def start(self) -> str:
        self._thread.start()
        return self.url

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()

    def _app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        path = environ.get("PATH_INFO", "")
        if path in self.controls:
            return self._control(environ, start_response, path, body)
        if path.startswith("/moto-api"):
            return _refuse(start_response, "403 Forbidden", "AccessDenied", CLOSED_API, True)
        json_protocol = path != "/" or "HTTP_X_AMZ_TARGET" in environ
        if not signed_request_ok(self.keys, environ["REQUEST_METHOD"], _url(environ),
                                 _headers(environ), body):  # fmt: skip
            return _refuse(
                start_response, "403 Forbidden", "InvalidClientTokenId", REFUSED, json_protocol
            )
        if stale := request_time_problem(environ.get("HTTP_X_AMZ_DATE", "")):
            return _refuse(
                start_response, "403 Forbidden", "InvalidSignatureException", stale, json_protocol
            )
        response = list(self._moto(environ, start_response))
        if _is_write(environ, body):
            for prefix, callback in self._on_write:
                if path.startswith(prefix):
                    callback()
        return response

    def _control(
        self, environ: dict[str, Any], start_response: StartResponse, path: str, body: bytes
    ) -> list[bytes]:
        given = environ.get("HTTP_AUTHORIZATION", "").removeprefix("Bearer ").strip()
        if not self.control_token or not hmac.compare_digest(given, self.control_token):
            return _answer(
                start_response, "401 Unauthorized", {"message": "not this world's token"}
            )
        try:
            request = json.loads(body) if body else None
            answer = self.controls[path](environ["REQUEST_METHOD"], request)
        except KubeApiError as error:
            return _answer(
                start_response, f"{error.code} {error.reason}", {"message": error.message}
            )
        except ValueError as error:
            return _answer(start_response, "400 BadRequest", {"message": f"not JSON: {error}"})
        return _answer(start_response, "200 OK", answer)


def _answer(start_response: StartResponse, status: str, document: dict) -> list[bytes]:
    body = json.dumps(document).encode()
    start_response(status, [("Content-Type", "application/json"),
                            ("Content-Length", str(len(body)))])  # fmt: skip
    return [body]


def _url(environ: dict[str, Any]) -> str:
    """The URL as the client signed it (path still percent-encoded)."""
    uri = environ.get("RAW_URI") or environ.get("REQUEST_URI") or environ.get("PATH_INFO", "/")
    return f"http://{environ.get('HTTP_HOST', '')}{uri}"


def _headers(environ: dict[str, Any]) -> dict[str, str]:
    headers = {
        key[5:].lower().replace("_", "-"): str(value)
        for key, value in environ.items()
        if key.startswith("HTTP_")
    }
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(key):
            headers[key.lower().replace("_", "-")] = str(environ[key])
    return headers


def _refuse(
    start_response: StartResponse, status: str, code: str, message: str, as_json: bool
) -> list[bytes]:
    """An AWS-shaped error boto3 parses: JSON for REST/JSON services, XML for query ones."""
    if as_json:
        body = json.dumps({"__type": code, "message": message}).encode()
        content_type = "application/json"
    else:
        body = (
            f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code>"
            f"<Message>{message}</Message></Error></ErrorResponse>"
        ).encode()
        content_type = "text/xml"
    start_response(status, [("Content-Type", content_type), ("x-amzn-ErrorType", code),
                            ("Content-Length", str(len(body)))])  # fmt: skip
    return [body]
