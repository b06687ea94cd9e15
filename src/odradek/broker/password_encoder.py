"""Dynamic password settings kept encrypted in the metadata, as Kafka's PasswordEncoder keeps them.

A password-type setting set at runtime (KIP-226: a listener's `ssl.keystore.password`,
`ssl.key.password`, `ssl.truststore.password`, KIP-651's inline PEM) is written to ZooKeeper's
`/config/brokers/<id>` (the single node's metadata file) encrypted with `password.encoder.secret`,
in Kafka's format, so that Kafka's brokers and tools and odradek's read each other's values: a
comma-separated map `name:value` of

- `keyFactoryAlgorithm` (PBKDF2WithHmacSHA512 by default), `iterations` (4096), `keyLength` (bits,
  128), `salt` (256 random bytes, base64): the AES key is PBKDF2 of the secret with these;
- `cipherAlgorithm` (AES/CBC/PKCS5Padding by default, or AES/GCM/NoPadding), `initializationVector`
  (base64; with GCM also `authenticationTagLength` in bits);
- `encryptedPassword` (base64 of the cipher text of the password's UTF-8 bytes) and
  `passwordLength` (the password's length in Java chars, UTF-16 code units: a sanity check).

`password.encoder.old.secret`, when set, decodes what the previous secret encoded (Kafka re-encodes
such values with the new secret when the broker starts; odradek does too, see dynamic_config.py).
Neither secret nor a password is ever part of a message or a log line: errors name the setting.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

SECRET = "password.encoder.secret"
OLD_SECRET = "password.encoder.old.secret"
KEY_FACTORY = "password.encoder.keyfactory.algorithm"
CIPHER = "password.encoder.cipher.algorithm"
KEY_LENGTH = "password.encoder.key.length"
ITERATIONS = "password.encoder.iterations"

#: Java's SecretKeyFactory names odradek derives keys with -> hashlib's digest name
KEY_FACTORIES = {
    "PBKDF2WithHmacSHA512": "sha512",
    "PBKDF2WithHmacSHA384": "sha384",
    "PBKDF2WithHmacSHA256": "sha256",
    "PBKDF2WithHmacSHA224": "sha224",
    "PBKDF2WithHmacSHA1": "sha1",
}
CBC, GCM = "AES/CBC/PKCS5Padding", "AES/GCM/NoPadding"
CIPHERS = (CBC, GCM)
SALT_BYTES = 256  # as Kafka's encoder
GCM_TAG_BITS = 128  # Java's default for AES/GCM
GCM_IV_BYTES = 12  # Java's default for AES/GCM


class PasswordDecodeError(ValueError):
    """An encoded password that does not decode (another secret, a damaged value): the message
    never holds the value or the secret."""


def java_length(text: str) -> int:
    """String.length() in Java: UTF-16 code units (a character beyond the BMP counts two)."""
    return len(text.encode("utf-16-le")) // 2


def check_settings(config: Mapping[str, Any]) -> str | None:
    """What is wrong with the `password.encoder.*` settings (a message without secrets), or None."""
    factory, cipher = config[KEY_FACTORY], config[CIPHER]
    if factory and factory not in KEY_FACTORIES:
        return f"{KEY_FACTORY} {factory} is not supported: one of {', '.join(KEY_FACTORIES)}"
    if cipher not in CIPHERS:
        return f"{CIPHER} {cipher} is not supported: one of {', '.join(CIPHERS)}"
    if config[KEY_LENGTH] not in (128, 192, 256):
        return f"{KEY_LENGTH} {config[KEY_LENGTH]} is not an AES key length: 128, 192 or 256"
    return None


@dataclass(frozen=True)
class PasswordEncoder:
    """Encodes with `secret` and the settings; decodes what `secret` (or `old_secret`) encoded
    with whatever parameters the value names."""

    secret: str = field(repr=False)
    old_secret: str = field(default="", repr=False)
    key_factory: str = "PBKDF2WithHmacSHA512"
    cipher: str = CBC
    key_length: int = 128
    iterations: int = 4096

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> PasswordEncoder | None:
        """The encoder the broker's settings make, or None without `password.encoder.secret`."""
        if not config[SECRET]:
            return None
        return cls(
            config[SECRET],
            config[OLD_SECRET],
            config[KEY_FACTORY] or "PBKDF2WithHmacSHA512",
            config[CIPHER],
            config[KEY_LENGTH],
            config[ITERATIONS],
        )

    def encode(self, password: str, *, salt: bytes | None = None, iv: bytes | None = None) -> str:
        """Kafka's encoded form of `password` (`salt` and `iv` random unless given: tests)."""
        salt = os.urandom(SALT_BYTES) if salt is None else salt
        key = _key(self.secret, self.key_factory, salt, self.iterations, self.key_length)
        data = password.encode("utf-8")
        fields = {
            "keyFactoryAlgorithm": self.key_factory,
            "cipherAlgorithm": self.cipher,
            "keyLength": str(self.key_length),
            "salt": _b64(salt),
            "iterations": str(self.iterations),
        }
        if self.cipher == GCM:
            iv = os.urandom(GCM_IV_BYTES) if iv is None else iv
            gcm = Cipher(algorithms.AES(key), modes.GCM(iv)).encryptor()
            encrypted = gcm.update(data) + gcm.finalize() + gcm.tag  # Java appends the tag
            fields["authenticationTagLength"] = str(GCM_TAG_BITS)
        else:
            iv = os.urandom(16) if iv is None else iv
            padder = padding.PKCS7(128).padder()
            enc = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
            encrypted = enc.update(padder.update(data) + padder.finalize()) + enc.finalize()
        fields["encryptedPassword"] = _b64(encrypted)
        fields["passwordLength"] = str(java_length(password))
        fields["initializationVector"] = _b64(iv)
        return ",".join(f"{k}:{v}" for k, v in fields.items())

    def decode(self, encoded: str) -> str:
        """The password `encoded` holds (PasswordDecodeError if neither secret decodes it)."""
        try:
            return _decode(self.secret, encoded)
        except PasswordDecodeError:
            if not self.old_secret:
                raise
        return _decode(self.old_secret, encoded)

    def reencoded(self, encoded: str) -> str | None:
        """`encoded` encrypted again with the secret if the old secret encrypted it, None if the
        secret did (PasswordDecodeError if neither)."""
        try:
            _decode(self.secret, encoded)
            return None
        except PasswordDecodeError:
            if not self.old_secret:
                raise
        return self.encode(_decode(self.old_secret, encoded))


def _decode(secret: str, encoded: str) -> str:
    params = dict(item.partition(":")[::2] for item in encoded.split(",") if item)
    try:
        factory = params.get("keyFactoryAlgorithm") or "PBKDF2WithHmacSHA512"
        cipher = params["cipherAlgorithm"]
        key = _key(secret, factory, _unb64(params["salt"]), int(params["iterations"]), int(params["keyLength"]))
        iv, data = _unb64(params["initializationVector"]), _unb64(params["encryptedPassword"])
        length = int(params["passwordLength"])
    except (KeyError, ValueError, binascii.Error):
        raise PasswordDecodeError("Password could not be decoded: not an encoded password") from None
    try:
        if cipher == GCM:
            tag_bytes = int(params.get("authenticationTagLength", GCM_TAG_BITS)) // 8
            if tag_bytes < 4 or len(data) < tag_bytes:
                raise ValueError("short")
            mode = modes.GCM(iv, data[-tag_bytes:], min_tag_length=tag_bytes)
            gcm = Cipher(algorithms.AES(key), mode).decryptor()
            plain = gcm.update(data[:-tag_bytes]) + gcm.finalize()
        elif cipher == CBC:
            dec = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
            unpadder = padding.PKCS7(128).unpadder()
            plain = unpadder.update(dec.update(data) + dec.finalize()) + unpadder.finalize()
        else:
            raise PasswordDecodeError(f"Password could not be decoded: cipher {cipher} is not supported")
        password = plain.decode("utf-8")
    except (ValueError, InvalidTag, UnicodeDecodeError):
        raise PasswordDecodeError("Password could not be decoded") from None
    if java_length(password) != length:
        raise PasswordDecodeError("Password could not be decoded, sanity check of length failed")
    return password


def _key(secret: str, factory: str, salt: bytes, iterations: int, key_length: int) -> bytes:
    digest = KEY_FACTORIES.get(factory)
    if digest is None:
        raise PasswordDecodeError(f"Password could not be decoded: key factory {factory} is not supported")
    if key_length not in (128, 192, 256) or iterations < 1:
        raise PasswordDecodeError("Password could not be decoded: bad key length or iterations")
    # Java's PBEKeySpec takes the secret as chars; its PBKDF2 implementations use their UTF-8 bytes
    return hashlib.pbkdf2_hmac(digest, secret.encode("utf-8"), salt, iterations, key_length // 8)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)
