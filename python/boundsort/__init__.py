"""
boundsort - the Python face of a pip-installed boundsort: where the program is.

The wheel carries the C program inside this package, at boundsort/bin/boundsort (its shared libraries,
when the wheel was repaired by auditwheel, in boundsort.libs/ beside the package, found through the
program's RPATH). The `boundsort` command that pip puts on PATH is boundsort._cli.main, which replaces
itself with that program (exec), so options, exit codes and signals are the program's own.
"""
from pathlib import Path

__all__ = ["binary", "__version__"]

try:
    from importlib.metadata import PackageNotFoundError, version as _version

    __version__ = _version("boundsort")
except (ImportError, PackageNotFoundError):  # run from a source tree, not installed
    __version__ = "unknown"


def binary():
    """Absolute path of the program installed with this package, or None (a source tree)."""
    exe = Path(__file__).resolve().parent / "bin" / "boundsort"
    return str(exe) if exe.is_file() else None
