"""The static publisher and the server give byte-identical trees, incrementally too."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import StoreLog, publish_tiles
from store.tiles import TiledLog
from tests.verifier.test_follow import ORIGIN, grow, log
from tlog.keys import generate_key


def _served_equals_published(store, root: Path) -> int:  # type: ignore[no-untyped-def]
    served = TiledLog(StoreLog(store))
    size = store.checkpoint().size
    n = 0
    for f in sorted(root.rglob("*")):
        rel = f.relative_to(root).as_posix()
        if not f.is_file() or not rel.startswith("tile/"):
            continue
        assert served.tile_or_bundle(rel, size).body == f.read_bytes(), rel
        n += 1
    return n


@pytest.mark.parametrize("sizes", [[1], [255], [256], [257], [300, 700], [255, 256, 513]])
def test_published_is_served(tmp_path: Path, sizes: list[int]) -> None:
    store = log(generate_key(ORIGIN), sizes[0])
    root = tmp_path / "www"
    publish_tiles(StoreLog(store), root)
    for size in sizes[1:]:
        grow(store, size - store.checkpoint().size)
        publish_tiles(StoreLog(store), root)
    assert _served_equals_published(store, root) > 0
