"""The exceptions of package tlog.

One small hierarchy, so that callers branch on what happened, never on message text:

* :class:`TlogError` — the root; every error raised on purpose by tlog is one.
* :class:`MalformedError` — the input does not parse: it is not in the format it claims to be.
  The message names the format and what is wrong ("checkpoint: size has a leading zero").
* :class:`VerificationError` — the input parses but is not what the keys or the math say it
  should be. Subclasses say which kind:

  * :class:`UnverifiedNoteError` — no signature from a trusted key on a note;
  * :class:`InvalidSignatureError` — a trusted key's signature line does not verify;
  * :class:`ProofError` — an inclusion or consistency proof does not verify;
  * :class:`PolicyError` — signatures verify, but a policy's quorum is not met.

* :class:`UsageError` — the caller broke a stated precondition (an index past the tree size,
  a key name with a space). It is a programming or command-line error, not bad data.

The mapping of these classes to process exit statuses lives in :mod:`tlog.cli.run` only; the
mapping to HTTP statuses lives in the witness server only.
"""

from __future__ import annotations

__all__ = [
    "InvalidSignatureError",
    "MalformedError",
    "PolicyError",
    "ProofError",
    "TlogError",
    "UnverifiedNoteError",
    "UsageError",
    "VerificationError",
]


class TlogError(Exception):
    """Root of every exception tlog raises on purpose."""


class MalformedError(TlogError, ValueError):
    """The input is not a well-formed instance of its format."""


class UsageError(TlogError, ValueError):
    """A documented precondition of the called function does not hold."""


class VerificationError(TlogError):
    """The input is well formed but does not verify."""


class UnverifiedNoteError(VerificationError):
    """A note carries no verified signature from a trusted key."""


class InvalidSignatureError(VerificationError):
    """A signature line from a trusted key (name and key ID both match) does not verify.

    Attributes:
        name: the key name of the failing line.
        key_id: the 32-bit key ID of the failing line.
    """

    def __init__(self, name: str, key_id: int) -> None:
        super().__init__(f"invalid signature for key {name}+{key_id:08x}")
        self.name = name
        self.key_id = key_id


class ProofError(VerificationError):
    """A Merkle inclusion or consistency proof does not verify."""


class PolicyError(VerificationError):
    """A checkpoint's verified signatures do not satisfy the policy."""
