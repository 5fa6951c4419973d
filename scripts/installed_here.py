"""Exit 0 when scalecomm is installed from this checkout (editable) with the
metadata pyproject.toml declares (version, console scripts, torch backend
entry point), so an in-place rebuild is all a setup needs; 1 otherwise.
Run with ``python -I`` (this checkout must not be on the path by accident)."""

import importlib.metadata as md
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    try:
        import tomllib
    except ImportError:  # Python 3.10: reinstall rather than guess
        return 1
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    try:
        dist = md.distribution(project["name"])
    except md.PackageNotFoundError:
        return 1
    want = {("console_scripts", k, v) for k, v in project.get("scripts", {}).items()}
    for group, points in project.get("entry-points", {}).items():
        want |= {(group, k, v) for k, v in points.items()}
    have = {(e.group, e.name, e.value) for e in dist.entry_points}
    spec = importlib.util.find_spec("pyscalecomm_autoload")
    here = spec is not None and spec.origin == os.path.join(ROOT, "pyscalecomm_autoload.py")
    return 0 if dist.version == project["version"] and want == have and here else 1


if __name__ == "__main__":
    sys.exit(main())
