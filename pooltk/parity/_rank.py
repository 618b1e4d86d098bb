"""``python -m pooltk.parity._rank RANK WORLD OUT_DIR STORE_PORT [PRELUDE]``: one rank of a launch."""

import json
import sys
from pathlib import Path

from pooltk.parity.worker import spawn_entry

if __name__ == "__main__":
    rank, world, out_dir, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    spec_json = (Path(out_dir) / "spec.json").read_text()
    json.loads(spec_json)  # fail here, readably, on a corrupt spec file
    prelude = sys.argv[5] if len(sys.argv) > 5 else None
    spawn_entry(rank, world, spec_json, out_dir, port, prelude)
