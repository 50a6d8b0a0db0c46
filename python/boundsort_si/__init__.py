"""
boundsort_si - SpikeInterface integration of the boundsort spike sorter.

Importing this module registers `BoundsortSorter` with SpikeInterface, so that
`spikeinterface.sorters.run_sorter("boundsort", recording, folder, **params)` works.
Registration appends the class to `spikeinterface.sorters.sorterlist.sorter_full_list` and adds it to
`sorter_dict` (the dict that run_sorter, get_default_sorter_params, installed_sorters... look up),
in place, so every module that imported those objects sees it. A pip-installed boundsort does this
without the import, when SpikeInterface is imported (boundsort._si_hook).
"""
from .sorter import BoundsortSorter, BoundsortError

__all__ = ["BoundsortSorter", "BoundsortError", "register"]
from boundsort import __version__  # the pip package's, i.e. include/boundsort.h's  # noqa: E402


def register(sorterlist=None):
    """Register BoundsortSorter with SpikeInterface (idempotent); returns the class. `sorterlist`: the
    module spikeinterface.sorters.sorterlist when the caller has it (boundsort._si_hook, while
    spikeinterface.sorters is still being imported)."""
    if sorterlist is None:
        from spikeinterface.sorters import sorterlist

    if BoundsortSorter.sorter_name not in sorterlist.sorter_dict:
        sorterlist.sorter_full_list.append(BoundsortSorter)
        sorterlist.sorter_dict[BoundsortSorter.sorter_name] = BoundsortSorter
    return BoundsortSorter


register()
