"""The public API of the four packages (docs/architecture.md §1): each package's ``__init__``
is a map with ``__all__``, every exported name resolves, and examples/tour.py uses only
public names.
"""

from __future__ import annotations

import ast
import importlib
import pydoc
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tlog", "store", "witness", "verifier")


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    names = module.__all__
    assert names, f"{package} exports nothing"
    assert len(set(names)) == len(names)
    for name in names:
        assert not name.startswith("_")
        if (ROOT / package / name).is_dir() or (ROOT / package / f"{name}.py").exists():
            # tlog's map is of its modules: each is imported when used (import tlog.note)
            importlib.import_module(f"{package}.{name}")
        assert getattr(module, name) is not None
        assert name in dir(module)


@pytest.mark.parametrize("package", PACKAGES)
def test_help_shows_a_map(package: str) -> None:
    text = pydoc.render_doc(importlib.import_module(package), renderer=pydoc.plaintext)  # type: ignore[attr-defined]
    doc = importlib.import_module(package).__doc__ or ""
    assert "Not yet implemented" not in doc
    # The map names the package's modules (tlog: its formats; the others: where names live).
    modules = {m for m in (ROOT / package).glob("*.py") if m.stem != "__init__"}
    named = [m.stem for m in modules if f"{package}.{m.stem}" in text]
    assert len(named) >= 4, (package, named)


def test_importing_the_packages_is_cheap() -> None:
    # store.db (the witness's storage engine) must not load the journal; witness not aiohttp;
    # none of them a database driver at import.
    code = (
        "import sys, store, witness, verifier, tlog, store.db; "
        "bad = [m for m in ('store.writes', 'store.export', 'aiohttp', 'psycopg', 'requests')"
        " if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _public_names(module: str) -> set[str]:
    return set(importlib.import_module(module).__all__)


def test_the_tour_imports_only_public_names() -> None:
    tree = ast.parse((ROOT / "examples" / "tour.py").read_text(encoding="utf-8"))
    seen = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            top = node.module.split(".")[0]
            if top not in PACKAGES:
                continue
            seen += 1
            if top in ("store", "witness", "verifier"):
                # the embedder's and operator's API: the package map itself
                assert node.module == top, node.module
            for alias in node.names:
                public = _public_names(node.module)
                is_module = (
                    f"{node.module}.{alias.name}" in sys.modules
                    or (ROOT / node.module.replace(".", "/") / f"{alias.name}.py").exists()
                )
                assert alias.name in public or is_module, (node.module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                assert alias.name.split(".")[0] not in ("store", "witness", "verifier")
    assert seen >= 5
