"""_cli.py - the `boundsort` console command of the pip package: exec of the bundled program."""
import os
import sys

from . import binary


def main():
    exe = binary()
    if exe is None:
        sys.stderr.write("boundsort: the program is not installed with this Python package "
                         "(reinstall it with pip install boundsort)\n")
        return 127
    os.execv(exe, ["boundsort"] + sys.argv[1:])  # the program finds itself through /proc/self/exe


if __name__ == "__main__":
    sys.exit(main())
