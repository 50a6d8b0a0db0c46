"""
_si_hook.py - makes run_sorter("boundsort", ...) work without `import boundsort_si`.

boundsort.pth (installed beside the packages) imports this module when Python starts. It imports nothing
heavy: it puts a one-shot finder first on sys.meta_path that waits for the import of
spikeinterface.sorters.sorterlist (the module holding SpikeInterface's sorter tables), lets the normal
path finder load it, and once it has run, registers boundsort_si.BoundsortSorter in those tables. A
Python that never imports SpikeInterface pays only for this module. BOUNDSORT_NO_SI_HOOK=1 turns it off.
"""
import importlib.abc
import importlib.machinery
import os
import sys
import warnings

_TARGET = "spikeinterface.sorters.sorterlist"


class _RegisteringLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            import boundsort_si

            boundsort_si.register(module)
        except Exception as exc:  # SpikeInterface itself must still import
            warnings.warn(f"boundsort: could not register the SpikeInterface sorter: {exc}")


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisteringLoader(spec.loader)
        return spec


def install():
    if os.environ.get("BOUNDSORT_NO_SI_HOOK") or _TARGET in sys.modules:
        return
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


install()
