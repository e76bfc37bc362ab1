"""Package exports imported on first use (PEP 562 module ``__getattr__``).

A package's ``__init__`` runs whenever any of its modules is imported, so eager re-exports there
make every deployed function import every module of the package: the chat function would load
the local orchestrator, SQLite and the client-side reducer it never runs. Packages re-export
such names lazily instead: ``from durable_harness.runner import LocalOrchestrator`` still works,
and imports ``runner.local`` only then.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports each name of ``exports`` (name to
    relative module, e.g. ``{"LocalOrchestrator": ".local"}``) on first use, then keeps it."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    return __getattr__
