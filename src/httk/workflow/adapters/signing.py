"""Ed25519 operator identity: key creation, request signatures and their verification.

A signature is attribution, not authorization: a request without one applies as
before, and one whose signature does not verify is quarantined. The key lives in
the operator's config directory, readable only by them. Spec: 000 "Inspect and
control" (operator identity).
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ALGORITHM = "ed25519"
KEY_NAME = "operator_ed25519"


class SignatureError(ValueError):
    """A signature that does not verify, or a signature document that is malformed."""


def config_dir(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_CONFIG_HOME")
    if not base or not os.path.isabs(base):
        base = os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".config")
    return Path(base) / "httk-workflow"


def key_id(public: bytes) -> str:
    """A short, stable name of a public key: ``ed25519:`` + 16 hex digits of its sha256."""
    return f"{ALGORITHM}:{hashlib.sha256(public).hexdigest()[:16]}"


def create_identity(directory: Path, *, force: bool = False) -> dict[str, str]:
    """Create the operator key pair (private key mode 0600); refuse to overwrite without ``force``."""
    private_path = directory / KEY_NAME
    if private_path.exists() and not force:
        raise FileExistsError(f"{private_path} already exists; pass --force to replace the operator identity")
    directory.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    temp = directory / f".{KEY_NAME}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, private_path)
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    (directory / f"{KEY_NAME}.pub").write_text(base64.b64encode(public).decode("ascii") + "\n", encoding="utf-8")
    return {"private_key": str(private_path), "public_key": base64.b64encode(public).decode("ascii"),
            "key_id": key_id(public)}


class Ed25519Signer:
    """Signs canonical request bytes with the operator's key."""

    def __init__(self, private_key_path: Path) -> None:
        key = serialization.load_pem_private_key(private_key_path.read_bytes(), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise SignatureError(f"{private_key_path} is not an Ed25519 private key")
        self._key = key
        self._public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    def sign(self, data: bytes) -> dict[str, Any]:
        return {
            "algorithm": ALGORITHM,
            "public_key": base64.b64encode(self._public).decode("ascii"),
            "value": base64.b64encode(self._key.sign(data)).decode("ascii"),
        }


class Ed25519Verifier:
    """Verifies a detached request signature; returns the key id that signed it."""

    def verify(self, data: bytes, signature: Any) -> str:
        if not isinstance(signature, dict) or signature.get("algorithm") != ALGORITHM:
            raise SignatureError("unsupported signature: expected an ed25519 signature object")
        try:
            public = base64.b64decode(str(signature["public_key"]), validate=True)
            value = base64.b64decode(str(signature["value"]), validate=True)
            Ed25519PublicKey.from_public_bytes(public).verify(value, data)
        except (KeyError, ValueError, InvalidSignature) as error:
            raise SignatureError(f"the request signature does not verify ({type(error).__name__})") from None
        return key_id(public)


def default_signer(environ: Mapping[str, str]) -> Ed25519Signer | None:
    """The operator's signer when ``config init`` created a key, else ``None``."""
    path = config_dir(environ) / KEY_NAME
    return Ed25519Signer(path) if path.exists() else None
