"""Developer tools of the pooltk repository (not part of the installed ``pooltk`` package)."""
