"""The control plane's certificates, made per lab: one CA, the API server's serving certificate,
client certificates for the components, and the service-account signing key.

kubeadm makes the same set; EKS makes it too, out of sight. Everything is written 0600 into the
lab's own directory, never into a user's ~/.kube.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 365
# The first address of the stack's service range (EKS's default 10.100.0.0/16): the
# `kubernetes` Service, which in-cluster clients reach the API server by.
SERVICE_CIDR = "10.100.0.0/16"
KUBERNETES_SERVICE_IP = "10.100.0.1"
_SERVER_NAMES = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]


@dataclass(frozen=True)
class Issued:
    """A certificate and its key, as PEM text."""

    cert_pem: str
    key_pem: str


def key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
    )


@dataclass(frozen=True)
class Authority:
    """The lab's CA: it signs the serving and client certificates."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def new(cls) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        name = _name("kubernetes")
        cert = (
            _builder(name, name, key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )  # fmt: skip
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .sign(key, hashes.SHA256())
        )
        return cls(cert, key)

    @property
    def cert_pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    def issue(
        self,
        common_name: str,
        organization: str | None = None,
        server: bool = False,
        addresses: tuple[str, ...] = (),
        names: tuple[str, ...] = (),
    ) -> Issued:
        """A leaf certificate: a client's (CN = user, O = group) or a server's (with SANs:
        the API server's names, `names`, and the IP `addresses`)."""
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = _builder(_name(common_name, organization), self.cert.subject, key.public_key())
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
            critical=False,
        )
        if server:
            sans: list[x509.GeneralName] = [x509.DNSName(n) for n in (*_SERVER_NAMES, *names)]
            sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return Issued(cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem(key))


def service_account_key() -> tuple[str, str]:
    """The key pair service-account tokens are signed (private) and checked (public) with."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return key_pem(key), public.decode()


def write_private(path: Path, text: str) -> Path:
    """Write a secret readable by its owner only (created 0600, never widened)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(text)
    return path
