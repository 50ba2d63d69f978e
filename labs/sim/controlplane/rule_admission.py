"""The prometheus-operator's PrometheusRule admission webhook, served by the rehearsal world.

On EKS, kube-prometheus-stack (chart 88.5.3, `prometheusOperator.admissionWebhooks`, on by
default) registers the ValidatingWebhookConfiguration `kube-prometheus-stack-admission`: the API
server sends every PrometheusRule create and update to the operator's Service
(`kube-prometheus-stack-operator:443`, path `/admission-prometheusrules/validate`), and the
operator refuses one whose rules do not parse (`Rules are not valid`, each parse error a cause).
The chart's patch job then puts the CA of the webhook's certificate into the configuration
(`failurePolicy: Ignore` until then, and whenever the operator does not answer).

The rehearsal does the same with the real pieces it has: the release's objects include that
Service and ValidatingWebhookConfiguration (`data/kube-prometheus-stack.yaml`), the real
kube-apiserver calls the webhook through the lab's network (the Service's cluster IP routed
here, as metrics-server's is), and the verdict is the real promtool's (`promtool check rules`
on the object's groups, the parser the operator's `ValidateRule` uses). Validating in the world
where PrometheusRules become rule files instead would keep a bad object out of Prometheus but
let `kubectl apply` succeed, which is not what a learner sees on EKS. The same check is what
the world's operator uses to skip an object that does not parse (`RuleCheck`), as the real one
does, so one bad object never keeps the others out of Prometheus.
"""

from __future__ import annotations

import logging
import ssl
import subprocess
import threading
from collections.abc import Callable, Sequence
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from labs.aws.stack import MONITORING_NAMESPACE
from labs.sim.controlplane import build, pki
from labs.sim.controlplane.tls import LOOPBACK, ServerTls
from labs.sim.controlplane.webhook import serve_webhook, stop_webhook

OPERATOR_SERVICE = "kube-prometheus-stack-operator"
WEBHOOK_CONFIGURATION = "kube-prometheus-stack-admission"
WEBHOOK = "prometheusrulevalidate.monitoring.coreos.com"
VALIDATE_PATH = "/admission-prometheusrules/validate"
# The operator's words (pkg/admission/admission.go): the message, and the resource it names.
NOT_VALID = "Rules are not valid"
RESOURCE = "prometheusrules"
# promtool's own limit would be none; a rule check must answer inside the webhook's 10 s.
CHECK_SECONDS = 8.0
log = logging.getLogger(__name__)


def rule_file(groups: Sequence[Any]) -> str:
    """A PrometheusRule's groups as the rule file the operator renders (and validates)."""
    return yaml.safe_dump({"groups": list(groups)}, sort_keys=False)


class RuleCheck:
    """Whether a PrometheusRule's groups parse, as promtool (Prometheus' rule parser) says;
    remembered per text, since the world asks again on every pass."""

    def __init__(self, promtool: Callable[[], Path] | None = None) -> None:
        self._promtool = promtool or (lambda: build.pinned_binary(build.PROMTOOL_PROGRAM))
        self._known: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    def errors(self, text: str) -> list[str]:
        """promtool's parse errors for a rule file's `text` (none when it loads), without a file
        name, as the operator's rulefmt.Parse reports them."""
        with self._lock:
            known = self._known.get(text)
        if known is not None:
            return known
        found = self._check(text)
        with self._lock:
            self._known[text] = found
        return found

    def _check(self, text: str) -> list[str]:
        try:
            promtool = self._promtool()
        except (OSError, build.ControlPlaneUnavailable) as error:  # no Go to build it with
            log.warning("cannot check PrometheusRules without promtool: %s", error)
            return []  # as the webhook's failurePolicy Ignore lets them in
        command = [str(promtool), "check", "rules", "--lint=none"]
        try:
            done = subprocess.run(
                command, input=text, capture_output=True, text=True, timeout=CHECK_SECONDS
            )
        except subprocess.TimeoutExpired:
            return [f"promtool check rules took over {CHECK_SECONDS:.0f} s"]
        if done.returncode == 0:
            return []
        lines = [line.strip() for line in done.stderr.splitlines()]
        errors = [line for line in lines if line and line != "FAILED:"]
        return errors or [f"promtool check rules exited {done.returncode}"]


def review_answer(review: dict[str, Any], check: RuleCheck) -> dict[str, Any]:
    """The AdmissionReview the API server gets back, as the operator's validatePrometheusRules
    answers: allowed, or refused (422 Invalid) with each parse error as a cause."""
    request = review.get("request") or {}
    resource = request.get("resource") or {}
    if (resource.get("group"), resource.get("resource")) != ("monitoring.coreos.com", RESOURCE):
        cause = f"expected resource to be {RESOURCE}, but received {resource}"
        response = _refused("Unexpected resource kind", [cause])
    else:
        spec = (request.get("object") or {}).get("spec") or {}
        errors = check.errors(rule_file(spec.get("groups") or []))
        response = _refused(NOT_VALID, errors) if errors else {"allowed": True}
    return {
        "apiVersion": review.get("apiVersion", "admission.k8s.io/v1"),
        "kind": "AdmissionReview",
        "response": {"uid": request.get("uid", ""), **response},
    }


def _refused(message: str, causes: list[str]) -> dict[str, Any]:
    status = {
        "status": "Failure",
        "reason": "Invalid",
        "code": 422,
        "message": message,
        "details": {"name": RESOURCE, "causes": [{"message": cause} for cause in causes]},
    }
    return {"allowed": False, "status": status}


class RuleAdmission:
    """The webhook's HTTPS endpoint on loopback, with a certificate for the operator's Service
    from a CA of its own (what the chart's kube-webhook-certgen job makes)."""

    def __init__(self, check: RuleCheck) -> None:
        self._check = check
        self._ca = pki.Authority.new()
        self._server: ThreadingHTTPServer | None = None

    @property
    def ca_pem(self) -> str:
        """The caBundle the webhook's configuration needs to trust the endpoint."""
        return self._ca.cert_pem

    @property
    def address(self) -> str:
        assert self._server is not None, "start() first"
        return f"{LOOPBACK}:{self._server.server_address[1]}"

    def start(self) -> str:
        """Listen on a free loopback port; returns the address ("host:port")."""
        check = self._check

        def answer(review: dict[str, Any]) -> dict[str, Any]:
            return review_answer(review, check)

        self._server = serve_webhook(
            LOOPBACK, self._tls(), {VALIDATE_PATH: answer}, "rule-admission"
        )
        return self.address

    def _tls(self) -> ssl.SSLContext:
        service = f"{OPERATOR_SERVICE}.{MONITORING_NAMESPACE}"
        names = (service, f"{service}.svc", f"{service}.svc.cluster.local")
        issued = self._ca.issue(OPERATOR_SERVICE, server=True, names=names)
        return ServerTls(self._ca.cert_pem, issued.cert_pem, issued.key_pem).server_context()

    def stop(self) -> None:
        stop_webhook(self._server)
        self._server = None
