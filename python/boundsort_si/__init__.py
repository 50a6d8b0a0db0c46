"""
boundsort_si - SpikeInterface integration of the boundsort spike sorter.

Importing this module registers `BoundsortSorter` with SpikeInterface, so that
`spikeinterface.sorters.run_sorter("boundsort", recording, folder, **params)` works.
Registration appends the class to `spikeinterface.sorters.sorterlist.sorter_full_list` and adds it to
`sorter_dict` (the dict that run_sorter, get_default_sorter_params, installed_sorters... look up),
in place, so every module that imported those objects sees it.
"""
from .sorter import BoundsortSorter, BoundsortError

__all__ = ["BoundsortSorter", "BoundsortError", "register"]
__version__ = "0.1.0"


def register():
    """Register BoundsortSorter with SpikeInterface (idempotent); returns the class."""
    from spikeinterface.sorters import sorterlist

    if BoundsortSorter.sorter_name not in sorterlist.sorter_dict:
        sorterlist.sorter_full_list.append(BoundsortSorter)
        sorterlist.sorter_dict[BoundsortSorter.sorter_name] = BoundsortSorter
    return BoundsortSorter


register()
