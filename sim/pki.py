"""The simulation's own credentials once etcd's authentication is on (ETCD_AUTH=on, the default
with TLS=managed): what the function itself uses, made in Python from the CA the function keeps
in the parameter store.

etcd's JSON gateway, which the simulation's clients speak, refuses a client certificate with a
common name once authentication is on, and takes the user from a token instead. So, like the
function: a certificate with no common name, and short-lived `root` tokens (JWT, ES256) signed
with the cluster's token key, which members hold too. A program of a real deployment speaks gRPC
with `etcd-asg client-cert USER --prefix P`, or logs in with a password, instead."""

from __future__ import annotations

import base64
import datetime
import json
import os
import time

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, utils
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# As src/pki/tokens.rs: the revision no auth store reaches.
ROOT_TOKEN_REVISION = 1 << 53


def _b64(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


class Credentials:
    """A certificate without a common name from the CA kept as `ca_json`, and root tokens signed
    with `token_key_pem`."""

    def __init__(self, ca_json: str, token_key_pem: str, out_dir: str):
        ca = json.loads(ca_json)
        self._key = serialization.load_pem_private_key(ca["key_pem"].encode(), None)
        self._token_key = serialization.load_pem_private_key(token_key_pem.encode(), None)
        ca_cert = x509.load_pem_x509_certificate(ca["cert_pem"].encode())
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "simulation")]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        os.makedirs(out_dir, exist_ok=True)
        self.ca = os.path.join(out_dir, "ca.crt")
        self.cert = os.path.join(out_dir, "simulation.crt")
        self.key = os.path.join(out_dir, "simulation.key")
        with open(self.ca, "w") as f:
            f.write(ca["cert_pem"])
        with open(self.cert, "wb") as f:
            f.write(cert.public_bytes(serialization.Encoding.PEM))
        fd = os.open(self.key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))

    def token(self) -> str:
        """A root token valid five minutes."""
        header = _b64(json.dumps({"alg": "ES256", "typ": "JWT"}).encode())
        claims = {"username": "root", "revision": ROOT_TOKEN_REVISION, "exp": int(time.time()) + 300}
        payload = _b64(json.dumps(claims).encode())
        der = self._token_key.sign(header + b"." + payload, ec.ECDSA(hashes.SHA256()))
        r, s = utils.decode_dss_signature(der)
        signature = _b64(r.to_bytes(32, "big") + s.to_bytes(32, "big"))
        return (header + b"." + payload + b"." + signature).decode()
