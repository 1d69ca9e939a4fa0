"""Tests for tlog.checkpoint: the checkpoint note text and its strict parsing (C2SP
tlog-checkpoint, https://c2sp.org/tlog-checkpoint).

The edge case of a strict parser: an empty origin, a root that is not 32 bytes, an empty
extension line, a missing final LF, a size with leading zeros or out of range are all refused,
also inside a signed note (testdata/transparency-dev-formats/README.md: the formats library
accepts some of them). Test names keep the case numbers of tests/tlog/__init__.py.
"""

from __future__ import annotations

import pytest

from tests.tlog.helpers import tiny_log
from tlog.checkpoint import Checkpoint, open_checkpoint
from tlog.encoding import MAX_INT63, b64encode
from tlog.errors import MalformedError
from tlog.note import open_note, sign_note


def test_edge_28_checkpoint_strictness() -> None:
    root_b64 = b64encode(tiny_log().store.root(5))
    assert Checkpoint.parse(f"Log\n5\n{root_b64}\next\n".encode()).extensions == ("ext",)
    bad_texts = [
        f"\n5\n{root_b64}\n",  # empty origin
        "Log\n123\nYmFuYW5hcw==\n",  # 7-byte root, accepted by formats
        f"Log\n5\n{root_b64}\n\n",  # empty extension line
        f"Log\n5\n{root_b64}\n\n\n\n",  # formats' "\n\n\n"
        f"Log\n5\n{root_b64}\next\n\n",
        f"Log\n5\n{root_b64}",  # missing final LF
        "Log\n123\nYmFuYW5hcw==",
        f"Log\n05\n{root_b64}\n",  # leading zero
        f"Log\n-34\n{root_b64}\n",
        f"Log\n{MAX_INT63 + 1}\n{root_b64}\n",  # out of range
        f"Log\n3438945738945739845734895735\n{root_b64}\n",
        "Log\n123\nThisIsn'tBase64\n",
        "Head\n9944\n",
        "",
    ]
    for text in bad_texts:
        with pytest.raises(MalformedError):
            Checkpoint.parse(text.encode())
    with pytest.raises(MalformedError):
        Checkpoint("", 5, b"\x00" * 32)
    with pytest.raises(MalformedError):
        Checkpoint("Log", 5, b"bananas")
    with pytest.raises(MalformedError):
        Checkpoint("Log", 5, b"\x00" * 32, ("",))
    # Inside a signed note an empty extension line is in the signed text, and is refused there.
    log = tiny_log()
    note = sign_note(f"{log.origin}\n5\n{root_b64}\n\n".encode(), [log.signer])
    assert open_note(note, [log.verifier]).text.endswith(b"\n\n")
    with pytest.raises(MalformedError):
        open_checkpoint(note, [log.verifier])
