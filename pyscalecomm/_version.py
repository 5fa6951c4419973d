"""The version every tool reports (``--version``); the core's kVersion and
setup.py carry the same string."""

VERSION = "0.1.0"


def add_version(parser) -> None:
    """Adds ``--version`` ("scalecomm 0.1.0") to an argparse parser."""
    parser.add_argument("--version", action="version", version=f"scalecomm {VERSION}")
