"""accelopt: one import namespace over the repository's top-level folders.

The design keeps `graph/`, `nodes/`, `policies/`, `tools/`, `memory/`, `cli/` and `evals/` at the
top of the repository. An install maps them under `accelopt.` (pyproject's package-dir), so
nothing with a generic name lands in site-packages. In a plain checkout (no install, e.g. PYTHONPATH=.), the
repository root joins this package's path so that `accelopt.graph` finds `./graph` the same way.
"""

import os as _os

_here = _os.path.dirname(_os.path.abspath(__file__))
_root = _os.path.dirname(_here)
if not _os.path.isdir(_os.path.join(_here, "graph")) and _os.path.isfile(_os.path.join(_root, "graph", "__init__.py")):
    __path__.append(_root)  # noqa: F821 - a package's __path__
