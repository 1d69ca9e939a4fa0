"""The published test vectors in testdata/, as the tests read them.

testdata/README.md lists each folder (the project, commit and path it was copied or extracted
from); the README.md of each folder gives the details. JSON files are read as UTF-8; base64
fields are standard padded base64 (Go's encoding/json form of []byte), decoded strictly.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

TESTDATA = Path(__file__).resolve().parents[1] / "testdata"


def load(rel: str) -> Any:
    """The JSON file ``testdata/<rel>``."""
    return json.loads((TESTDATA / rel).read_text(encoding="utf-8"))


def b64(text: str) -> bytes:
    """Strict standard base64 (padding required, no other characters)."""
    return base64.b64decode(text, validate=True)
