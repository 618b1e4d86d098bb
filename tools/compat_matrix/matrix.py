"""Every requested release in turn, then the table printed and (unless --no-publish) published."""

from __future__ import annotations

import datetime as _dt
import shutil
import sys
import tempfile
from pathlib import Path

from tools.compat_matrix.host import log
from tools.compat_matrix.options import Options
from tools.compat_matrix.publish import earlier_rows, matrix_doc, merge_rows, publish
from tools.compat_matrix.release import run_release
from tools.compat_matrix.space import release_needs, shortfall_message
from tools.compat_matrix.spec import DOC, REPO
from tools.compat_matrix.table import table


def run_matrix(opts: Options) -> int:
    """Run the matrix; exit status 0 only when no release run FAILed (2 when the cache has no
    room)."""
    opts.cache_dir.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(opts.cache_dir).free
    short = shortfall_message(
        free,
        release_needs(opts.releases, opts.cache_dir),
        keep_envs=opts.keep_envs,
        cache=opts.cache_dir,
    )
    if short:
        print(short, file=sys.stderr)
        return 2
    date = _dt.date.today().isoformat()
    rows = []
    with tempfile.TemporaryDirectory(prefix="pooltk-compat-") as t:
        for release in opts.releases:
            row = run_release(release, opts, Path(t))
            rows.append(row)
            log(
                f"{release}: {row['outcome']} in {row['timings_s']['total']:.0f} s"
                + ("" if row["outcome"] != "FAIL" else f": {row['problems']}")
            )
    all_rows = merge_rows(rows, earlier_rows(date) if opts.publish else [])
    doc = matrix_doc(all_rows, date=date, argv=list(opts.argv))
    print()
    print(table(all_rows))
    if opts.publish:
        path, updated = publish(doc)
        print(
            f"\nwrote {path.relative_to(REPO)}"
            + (f" and the table in {DOC.relative_to(REPO)}" if updated else "")
        )
    return 0 if all(r["outcome"] != "FAIL" for r in rows) else 1
