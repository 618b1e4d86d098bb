"""pooltk's torch compatibility matrix: one throwaway venv per torch release, real checks, one \
table.

Run from the repository root::

    python -m tools.compat_matrix                              # all releases
    python -m tools.compat_matrix --releases 2.11.0 2.15.0     # a subset
    python -m tools.compat_matrix --keep-envs --cache-dir DIR  # keep venvs (DIR/envs) for poking
    python -m tools.compat_matrix --record-shape WHEEL  # add tests/compat/layouts/torch-V.json

For each release (default 2.11.0 2.12.1 2.13.0 2.14.1 2.15.0), one after another:

1. fetch   (:mod:`.fetch`) ``pip download`` torch==RELEASE with its own runtime wheels
           (nvidia-* for the CUDA builds; they only have to load here, nothing runs on a
           GPU) plus pooltk's test tools into CACHE/wheels/torch-RELEASE (skipped when
           already complete);
2. env     (:mod:`.envs`) ``python -m venv`` + ``pip install --no-index`` from that folder
           + pooltk from this working tree (a ``.pth`` development install: nothing is built
           or written into the repo);
3. checks  (:mod:`.checks`) ``python -m tools.compat_matrix.checks OUT`` under the env's
           python: ``pooltk probe --json``; pytest on tests/compat and tests/unit; gloo
           parity; negative controls with the guard off (must diverge) and on (must raise
           PoolOverrunError); for a layout that allocates per receive, the peak number of
           live receive buffers per stage (:mod:`.live_buffers`, imported in the ranks);
4. cleanup the env is deleted (``--keep-envs`` keeps it).

Then :mod:`.judge` gives each row its outcome, :mod:`.table` renders the matrix and
:mod:`.publish` writes ``docs/compat/matrix-DATE.json`` and the table in
``docs/torch-compat.md`` (``--no-publish`` skips both). Rows of releases run earlier the same
day are kept, so releases can be run one at a time. Exit status 0 only when every release run
is either pooled-and-bitwise-equal or cleanly standing down.

Where things come from (:mod:`.cli`): the wheel cache is ``--cache-dir``, else
``$POOLTK_COMPAT_CACHE``, else ``$XDG_CACHE_HOME/pooltk-compat``, else
``~/.cache/pooltk-compat`` (never inside the repository). Extra local wheel folders for pip are
``--find-links DIR`` (repeatable), else ``$POOLTK_COMPAT_FIND_LINKS`` (``os.pathsep``-separated),
else none. Every pip call runs with ``PIP_CONFIG_FILE=os.devnull``: no pip configuration file
applies (user, site or machine-wide, e.g. a constraint capping torch below the release under
test), so each env's wheels come only from the cache, the find-links folders and the index.

Nothing in this package imports torch at module level except :mod:`.live_buffers`' install
step, which acts only inside a parity rank of the matrix.
"""
