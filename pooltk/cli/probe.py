"""``pooltk probe``: which torch layout is here and whether install would work."""

from __future__ import annotations

import argparse
import json


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from pooltk.pool.torch_compat.layouts import detect
    from pooltk.pool.install import probe

    report = probe()
    detection = detect()
    if args.json:
        print(json.dumps({**report.to_dict(), "tried": list(detection.tried)}, indent=2))
        return 0
    print(f"torch            {report.torch_version}")
    print(f"layout           {report.layout or 'none recognised'}")
    would = "yes" if report.installed else "no (stock behaviour would be kept)"
    print(f"install would    {would}")
    if report.installed:
        what = {
            "rings+release": "rings of K buffer sets, and the last-stage release",
            "rings": "rings of K buffer sets (release=False)",
            "release": "the last-stage release alone (torch already allocates each buffer per "
            "receive)",
        }
        print(f"pooltk installs  {what.get(report.mode, report.mode)}")
        if "rings" in report.mode:
            made = "only K sets (lazy during setup)" if report.alloc_free else "all M, then K kept"
            print(f"buffers made     {made}")
        else:
            print("buffers made     by torch, one per receive, dropped when consumed")
    print(f"why              {report.reason}")
    for line in detection.tried:
        print(f"  not            {line}")
    return 0
