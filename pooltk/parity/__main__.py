"""``torchrun --nproc-per-node N -m pooltk.parity [pooltk parity flags]``: the multi-node launcher
users already have runs the parity check (see :mod:`pooltk.parity.command`)."""

import sys

from pooltk.parity.command import torchrun_main

if __name__ == "__main__":
    sys.exit(torchrun_main())
