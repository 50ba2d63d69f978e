"""TLS for the API emulator: a CA and a loopback server certificate, fresh per world.

kubectl and client-go send no credentials to a plain-HTTP API server (clientcmd applies a
user's token only over TLS), so an emulator that requires a bearer token must serve HTTPS,
as EKS does. The CA travels in the kubeconfig (`certificate-authority-data`) and in the EKS
cluster's `certificateAuthority`, exactly where EKS puts its own.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK = "127.0.0.1"
VALID_DAYS = 365


@dataclass(frozen=True)
class ServerTls:
    """A CA certificate and a server certificate (with its key) it signed, all PEM."""

    ca_pem: str
    cert_pem: str
    key_pem: str

    @property
    def ca_data(self) -> str:
        """The CA as a kubeconfig's certificate-authority-data (base64 of the PEM)."""
        return base64.b64encode(self.ca_pem.encode()).decode()

    def server_context(self) -> ssl.SSLContext:
        """What the emulator's listening socket wraps its connections with."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory() as scratch:  # load_cert_chain reads only files
            chain, key = Path(scratch, "chain.pem"), Path(scratch, "key.pem")
            chain.write_text(self.cert_pem + self.ca_pem)
            key.write_text(self.key_pem)
            context.load_cert_chain(chain, key)
        return context


def _pem(certificate: x509.Certificate) -> str:
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


def _builder(
    subject: str, issuer: str, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def new_server_tls(host: str = LOOPBACK) -> ServerTls:
    """A fresh CA (named like EKS's, "kubernetes") and a certificate for `host` it signed."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        _builder("kubernetes", "kubernetes", ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        _builder("kube-apiserver", "kubernetes", key.public_key())
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(host)), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return ServerTls(_pem(ca), _pem(server), key_pem)
