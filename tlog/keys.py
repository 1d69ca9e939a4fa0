"""Key text formats: verifier keys (vkeys) and signer key files, for every supported type.

Verifier key (c2sp.org/signed-note "vkey")::

    <name> "+" <key ID: 8 lowercase hex digits> "+" base64(type byte || public key)

Signer key (the golang.org/x/mod/sumdb/note private key form, so that keys move between this
toolkit and the Go tools)::

    "PRIVATE+KEY+" <name> "+" <key ID: 8 lowercase hex digits> "+" base64(type byte || secret)

Split on the first two (vkey) or four (signer key) ``+`` only: the base64 part may itself hold
``+``. The key ID must equal :func:`tlog.note.key_id` of the name, type and *public* key, and is
recomputed and compared; a mismatch is refused (Go's note.NewVerifier does the same;
transparency-dev/formats' ML-DSA parser does not).

Supported types:

======  ==========================================  ===================  =========
 byte    use                                         public key           secret
======  ==========================================  ===================  =========
 0x01    Ed25519 note signature (a log's key)        32 bytes             32-byte seed
 0x04    Ed25519 cosignature/v1 (a witness's key)    32 bytes             32-byte seed
 0x06    ML-DSA-44 subtree/v1 cosignature            1312 bytes           32-byte seed
======  ==========================================  ===================  =========

Other types (ECDSA 0x02, RFC 6962 0x05) are refused by name with
:class:`UnsupportedKeyError`; a note verifier treats their signature lines as unknown.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from tlog.cosignature import (
    TYPE_COSIGNATURE_V1,
    TYPE_SUBTREE_V1,
    CosignatureV1Signer,
    CosignatureV1Verifier,
    SubtreeV1Signer,
    SubtreeV1Verifier,
)
from tlog.encoding import b64decode, b64encode, shown
from tlog.errors import MalformedError, TlogError, UsageError
from tlog.note import TYPE_ED25519, Ed25519Signer, Ed25519Verifier, Verifier, check_key_name

__all__ = [
    "TYPE_NAMES",
    "AnySigner",
    "SignerKey",
    "UnsupportedKeyError",
    "cosigner_from_vkey",
    "format_vkey",
    "generate_key",
    "parse_signer_key",
    "parse_vkey",
    "parse_vkey_value",
    "verifier_for",
]


TYPE_NAMES = {
    TYPE_ED25519: "ed25519",
    TYPE_COSIGNATURE_V1: "cosignature/v1",
    TYPE_SUBTREE_V1: "mldsa44",
}
"""Short names of the supported key types, as the ``tlog keygen --type`` flag spells them."""

_KNOWN_UNSUPPORTED = {0x02: "ECDSA", 0x05: "RFC 6962 STH"}
_HEX8 = re.compile(r"[0-9a-f]{8}")

AnySigner = Ed25519Signer | CosignatureV1Signer | SubtreeV1Signer


class UnsupportedKeyError(MalformedError):
    """A well-formed key of a signature type this toolkit does not implement."""


def _split_id(name: str, id_text: str, what: str) -> int:
    check_key_name(name)
    if not _HEX8.fullmatch(id_text):
        raise MalformedError(f"{what} key ID {shown(id_text)} is not 8 lowercase hex digits")
    return int(id_text, 16)


def _type_of(raw: bytes, what: str) -> int:
    if not raw:
        raise MalformedError(f"{what} has an empty key")
    t = raw[0]
    if t in _KNOWN_UNSUPPORTED:
        raise UnsupportedKeyError(f"{what} is an {_KNOWN_UNSUPPORTED[t]} key (type 0x{t:02x})")
    if t not in TYPE_NAMES:
        raise MalformedError(f"{what} has unknown key type 0x{t:02x}")
    return t


def verifier_for(name: str, key_type: int, public_key: bytes) -> Verifier:
    """Build the verifier of a supported type from its parts."""
    if key_type == TYPE_ED25519:
        return Ed25519Verifier(name, public_key)
    if key_type == TYPE_COSIGNATURE_V1:
        return CosignatureV1Verifier(name, public_key)
    if key_type == TYPE_SUBTREE_V1:
        return SubtreeV1Verifier(name, public_key)
    raise MalformedError(f"unknown key type 0x{key_type:02x}")


def parse_vkey_value(
    vkey: object,
    what: str,
    not_str: str,
    *,
    error: type[TlogError] = MalformedError,
    parse: Callable[[str], Verifier] | None = None,
) -> Verifier:
    """``vkey``, a value a caller passed as a vkey, parsed by ``parse`` (default
    :func:`parse_vkey`): a non-str raises UsageError ``NOT_STR, not TYPE``; a malformed one
    ``error`` naming the ``what`` key and the reason."""
    if not isinstance(vkey, str):
        raise UsageError(f"{not_str}, not {type(vkey).__name__}")
    try:
        return (parse or parse_vkey)(vkey)
    except MalformedError as e:
        raise error(f"{what} key {vkey[:60]!r}: {e}") from None


def parse_vkey(vkey: str) -> Verifier:
    """Parse a verifier key of a supported type; the declared key ID must be the computed one."""
    parts = vkey.split("+", 2)
    if len(parts) != 3:
        raise MalformedError(f"verifier key {vkey[:60]!r} does not have the form name+id+key")
    name, id_text, b64 = parts
    declared = _split_id(name, id_text, "verifier")
    raw = b64decode(b64, "verifier key")
    v = verifier_for(name, _type_of(raw, "verifier key"), raw[1:])
    if v.key_id != declared:
        raise MalformedError(
            f"verifier key {name} declares key ID {declared:08x}, its key gives {v.key_id:08x}"
        )
    return v


def format_vkey(v: Verifier) -> str:
    """The vkey text of a verifier."""
    return f"{v.name}+{v.key_id:08x}+{b64encode(bytes([v.key_type]) + v.public_key)}"


def cosigner_from_vkey(vkey: str) -> Verifier:
    """A cosignature verifier from a vkey of type 0x04 or 0x06 — or 0x01.

    Witnesses often publish their Ed25519 key as a type-0x01 vkey (the Armored Witness devices
    do) while signing cosignature/v1 lines, whose key ID is computed with type 0x04. Such a
    vkey is read as the cosignature/v1 key of the same Ed25519 key.
    """
    v = parse_vkey(vkey)
    if v.key_type == TYPE_ED25519:
        return CosignatureV1Verifier(v.name, v.public_key)
    return v


@dataclass(frozen=True)
class SignerKey:
    """A parsed signer key file."""

    name: str
    key_type: int
    secret: bytes

    def signer(self) -> AnySigner:
        """The signer this key file holds."""
        if self.key_type == TYPE_ED25519:
            return Ed25519Signer(self.name, self.secret)
        if self.key_type == TYPE_COSIGNATURE_V1:
            return CosignatureV1Signer(self.name, self.secret)
        return SubtreeV1Signer(self.name, self.secret)

    def vkey(self) -> str:
        """The verifier key matching this signer key."""
        s = self.signer()
        return format_vkey(verifier_for(s.name, s.key_type, s.public_key))

    def format(self) -> str:
        """The key file text, without a final newline."""
        s = self.signer()
        body = b64encode(bytes([self.key_type]) + self.secret)
        return f"PRIVATE+KEY+{self.name}+{s.key_id:08x}+{body}"


def parse_signer_key(text: str) -> SignerKey:
    """Parse a ``PRIVATE+KEY+…`` signer key; the declared key ID must be the computed one.

    One final newline (as key files end) is accepted; nothing else around the key is.
    """
    if text.endswith("\n"):
        text = text[:-1]
    parts = text.split("+", 4)
    if len(parts) != 5 or parts[0] != "PRIVATE" or parts[1] != "KEY":
        raise MalformedError("signer key does not have the form PRIVATE+KEY+name+id+key")
    _, _, name, id_text, b64 = parts
    declared = _split_id(name, id_text, "signer")
    raw = b64decode(b64, "signer key")
    key = SignerKey(name, _type_of(raw, "signer key"), raw[1:])
    if len(key.secret) != 32:
        raise MalformedError(f"signer key secret is {len(key.secret)} bytes, not 32")
    computed = key.signer().key_id
    if computed != declared:
        raise MalformedError(
            f"signer key {name} declares key ID {declared:08x}, its key gives {computed:08x}"
        )
    return key


def generate_key(name: str, key_type: int = TYPE_ED25519, seed: bytes | None = None) -> SignerKey:
    """A new signer key of ``key_type`` (fresh random seed unless ``seed`` is given)."""
    check_key_name(name)
    if key_type not in TYPE_NAMES:
        raise MalformedError(f"unknown key type 0x{key_type:02x}")
    key = SignerKey(name, key_type, secrets.token_bytes(32) if seed is None else seed)
    key.signer()  # validates the name and seed for this type
    return key
