"""``torchrun --nproc-per-node N -m pooltk.parity [pooltk parity flags]``.

The launcher multi-node users already have: torchrun sets RANK / WORLD_SIZE / MASTER_*;
this joins with ``env://`` (NCCL when CUDA is available, else gloo), runs the same
variants as ``pooltk parity`` on this rank's stage, gathers on rank 0, and rank 0 prints
the report (``--json`` for machine-readable). Exit status 1 on every rank unless bitwise equal.
"""

import sys

from pooltk.parity.command import torchrun_main

if __name__ == "__main__":
    sys.exit(torchrun_main())
