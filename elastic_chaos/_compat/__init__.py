"""The names the toolkit had before 0.2 (``chaos``, ``trainer``), kept for one release.

0.1 installed two top-level packages with generic names: ``chaos`` and ``trainer`` (PyPI's
``trainer`` is Coqui's, and ``trainer.py`` sits beside ``main.py`` in many training
repositories, where ``from trainer import progress`` imported the user's file). 0.2 installs
only ``elastic_chaos``. The old names still import, with a FutureWarning that says the new
one, from this folder (:data:`FOLDER`) — which is never a top-level entry of site-packages:

- ``chaos``: the pytest plugin appends the folder to ``sys.path`` (last, so any other
  ``chaos`` a user has wins) when nothing else provides the name;
- ``trainer``: the local platform appends it to the nodes' ``PYTHONPATH`` when the nodes'
  python has no other ``trainer`` installed (a script's own ``trainer.py`` beside it comes
  first on ``sys.path`` anyway).

Each old module *is* the new one (one object in ``sys.modules`` under both names), so state
a module keeps (trainer.progress' emitter) is shared, not copied.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from pathlib import Path
from types import ModuleType

FOLDER = Path(__file__).resolve().parent
"""Holds the ``chaos`` and ``trainer`` shims; appended to a path, never prepended."""

REMOVED_IN = "0.3"


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``old.x.y`` as the already-importable ``new.x.y`` (the same module object)."""

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def find_spec(self, name: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if not name.startswith(self.old + "."):
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.new + spec.name[len(self.old):])
        self._real_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._real_spec   # the import system set the alias' spec: the module keeps its own


def alias(old: str, new: str, example: str) -> ModuleType:
    """Make ``old`` (and every ``old.x``) import as ``new``, warning once; returns ``new``."""
    warnings.warn(f"`{old}` is now `{new}` and the old name goes in elastic-chaos {REMOVED_IN}: {example}",
                  FutureWarning, stacklevel=3)
    if not any(isinstance(f, _Alias) and f.old == old for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias(old, new))
    module = importlib.import_module(new)
    sys.modules[old] = module
    return module


def site_has(name: str) -> bool:
    """Whether a top-level ``name`` is importable from the installed packages (the working
    folder and this folder left out: a user's own file there is not an installation)."""
    skip = {"", os.getcwd(), str(FOLDER)}
    return importlib.machinery.PathFinder.find_spec(name, [p for p in sys.path if p not in skip]) is not None


def append_to_sys_path() -> None:
    """Let ``import chaos`` find the shim, after everything else on the path."""
    if str(FOLDER) not in sys.path and not site_has("chaos"):
        sys.path.append(str(FOLDER))


def pythonpath_with_shims(current: str | None) -> str | None:
    """A nodes' PYTHONPATH that ends with the shims' folder (the old ``trainer`` name) when
    no other ``trainer`` is installed; ``current`` unchanged otherwise."""
    if site_has("trainer"):
        return current
    parts = [p for p in (current or "").split(os.pathsep) if p]
    return os.pathsep.join([*parts, str(FOLDER)]) if str(FOLDER) not in parts else current
