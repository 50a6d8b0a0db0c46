"""python -m boundsort ARGS: the same as the `boundsort` command."""
import sys

from ._cli import main

sys.exit(main())
