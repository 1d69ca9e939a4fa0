"""Package maps whose names are imported on first use (PEP 562).

A package ``__init__`` that is the map of its public API re-exports names from many modules.
Importing them all at once would make ``import store.db`` (which runs ``store/__init__``) load
the whole journal, and ``import witness`` load aiohttp. :func:`lazy_exports` gives the package
a module ``__getattr__`` and ``__dir__`` that import a name's module when the name is first
used; type checkers read the package's ``if TYPE_CHECKING:`` imports instead.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, module_of: Mapping[str, str], exported: list[str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose name ``N`` lives in ``module_of[N]``.

    Precondition: every name of ``exported`` (the package's ``__all__``) is a key of
    ``module_of``. A name that is not raises AttributeError, as for any module.
    """
    namespace = sys.modules[package].__dict__

    def getattr_(name: str) -> object:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        # __import__ rather than importlib.import_module: importlib is one more module to load.
        __import__(module)
        value = getattr(sys.modules[module], name)
        namespace[name] = value  # the next look-up is a plain attribute
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *exported})

    return getattr_, dir_
