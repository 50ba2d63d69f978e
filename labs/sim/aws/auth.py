"""The rehearsal's credentials: random per world, checked the way AWS and EKS check them.

Both endpoints listen on loopback, where every local user can reach them. So each world
has its own AWS key pair (its IAM user's, made by moto) and bearer token (kept in its 0600
endpoints file and kubeconfig):
moto's front door checks each request's SigV4 signature against the key pair, and the API
server (through the lab's token webhook) takes the bearer token, or an EKS token (`aws eks
get-token`: a presigned STS GetCallerIdentity URL) signed with the same keys for this cluster,
as EKS would.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urlsplit

if TYPE_CHECKING:  # botocore loads in ~0.2 s: only the rehearsal process signs and checks
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

# How a world's endpoints file names its key pair (boto3's own argument names).
CREDENTIAL_KEYS = ("aws_access_key_id", "aws_secret_access_key")
EKS_TOKEN_PREFIX = "k8s-aws-v1."
EKS_CLUSTER_HEADER = "x-k8s-aws-id"
SIGV4_TIME = "%Y%m%dT%H%M%SZ"
MAX_SKEW = timedelta(minutes=5)  # AWS refuses requests signed further from its clock
EKS_TOKEN_LIFETIME = timedelta(minutes=15)  # EKS refuses older tokens


@dataclass(frozen=True)
class Keys:
    """An AWS key pair (the world's is what `lab.env` exports and boto3 signs with)."""

    access_key_id: str
    secret_access_key: str

    def as_endpoints(self) -> dict[str, str]:
        return dict(zip(CREDENTIAL_KEYS, (self.access_key_id, self.secret_access_key), strict=True))

    @property
    def credentials(self) -> Credentials:
        from botocore.credentials import Credentials

        return Credentials(self.access_key_id, self.secret_access_key)


def new_token() -> str:
    """A random bearer token (the world's kubeconfig and its pace control take it)."""
    return secrets.token_urlsafe(32)


def _field(authorization: str, name: str) -> str:
    return authorization.partition(f"{name}=")[2].partition(",")[0].strip()


def signed_request_ok(
    keys: Keys, method: str, url: str, headers: Mapping[str, str], body: bytes
) -> bool:
    """An `Authorization: AWS4-HMAC-SHA256 ...` request signed with `keys` (headers lower-case)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    authorization = headers.get("authorization", "")
    scope = _field(authorization, "Credential").split("/")
    if not authorization.startswith("AWS4-HMAC-SHA256 ") or len(scope) != 5:
        return False
    if scope[0] != keys.access_key_id:
        return False
    signed = _field(authorization, "SignedHeaders").split(";")
    request = AWSRequest(
        method=method, url=url, data=body, headers={h: headers[h] for h in signed if h in headers}
    )
    request.context["timestamp"] = headers.get("x-amz-date", "")
    auth = SigV4Auth(keys.credentials, scope[3], scope[2])
    return _same(auth, request, _field(authorization, "Signature"))


def request_time_problem(amz_date: str, now: datetime | None = None) -> str | None:
    """AWS's refusal of a request signed more than 5 minutes from now (a replay, or a clock
    that is off); None when its time is fine."""
    now = now or datetime.now(UTC)
    signed = _signed_at(amz_date)
    if signed is None:
        return f"Signature expired: {amz_date!r} is not a request time (X-Amz-Date)"
    if signed < now - MAX_SKEW:
        return (
            f"Signature expired: {amz_date} is now earlier than {(now - MAX_SKEW):{SIGV4_TIME}} "
            f"({now:{SIGV4_TIME}} - 5 min.)"
        )
    if signed > now + MAX_SKEW:
        return (
            f"Signature not yet current: {amz_date} is still later than "
            f"{(now + MAX_SKEW):{SIGV4_TIME}} ({now:{SIGV4_TIME}} + 5 min.)"
        )
    return None


def eks_token_ok(keys: Keys, cluster: str, token: str) -> bool:
    """An EKS bearer token presigned with `keys` for `cluster`, at most 15 minutes old (as EKS
    takes them, whatever X-Amz-Expires says)."""
    from botocore.auth import SigV4QueryAuth
    from botocore.awsrequest import AWSRequest

    if not token.startswith(EKS_TOKEN_PREFIX):
        return False
    encoded = token.removeprefix(EKS_TOKEN_PREFIX)
    try:
        url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        return False
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    signature = query.pop("X-Amz-Signature", "")
    scope = query.get("X-Amz-Credential", "").split("/")
    if len(scope) != 5 or scope[0] != keys.access_key_id or scope[3] != "sts":
        return False
    if not query.get("X-Amz-Expires", "").isdigit() or _token_expired(query.get("X-Amz-Date", "")):
        return False
    headers = {"host": parts.netloc, EKS_CLUSTER_HEADER: cluster}
    unsigned = parts._replace(query=urlencode(sorted(query.items()))).geturl()
    request = AWSRequest(method="GET", url=unsigned, headers=headers)
    request.context["timestamp"] = query.get("X-Amz-Date", "")
    auth = SigV4QueryAuth(keys.credentials, "sts", scope[2], expires=int(query["X-Amz-Expires"]))
    return _same(auth, request, signature)


def _signed_at(amz_date: str) -> datetime | None:
    try:
        return datetime.strptime(amz_date, SIGV4_TIME).replace(tzinfo=UTC)
    except ValueError:
        return None


def _token_expired(amz_date: str) -> bool:
    now, signed = datetime.now(UTC), _signed_at(amz_date)
    return signed is None or not now - EKS_TOKEN_LIFETIME <= signed <= now + MAX_SKEW


def _same(auth: SigV4Auth, request: AWSRequest, signature: str) -> bool:
    """Sign `request` as the client did (its own timestamp) and compare in constant time."""
    canonical = auth.canonical_request(request)
    expected = auth.signature(auth.string_to_sign(request, canonical), request)
    return hmac.compare_digest(expected, signature)
