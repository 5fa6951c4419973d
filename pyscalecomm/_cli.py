"""What every command-line tool shares: ``--version`` and a help that shows
the defaults. Standard library only (the cluster runs without torch)."""

import argparse

VERSION = "0.1.0"  # the core's kVersion and setup.py carry the same string


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The module's docstring as written, and every option's default (where
    it has one and its help does not already say it)."""

    def _get_help_string(self, action):
        text = action.help or ""
        unset = action.default is None or action.default is False or action.default == argparse.SUPPRESS
        if unset or not action.option_strings or "default" in text.lower():
            return text
        if action.default in ("", []):
            return f"{text} (default: none)".strip()
        return f"{text} (default: %(default)s)".strip()


def add_version(parser: argparse.ArgumentParser) -> None:
    """Adds ``--version`` ("scalecomm 0.1.0"), and gives options without a
    help text an empty one, so the help shows their defaults too."""
    parser.add_argument("--version", action="version", version=f"scalecomm {VERSION}")
    for action in parser._actions:
        if action.help is None and action.default not in (None, argparse.SUPPRESS) and action.option_strings:
            action.help = " "


def add_nproc(parser: argparse.ArgumentParser, default: int = 0, help: str = "") -> None:
    """``--nproc N`` (or torchrun's ``--nproc-per-node N``): local ranks to spawn."""
    parser.add_argument(
        "--nproc",
        "--nproc-per-node",
        dest="nproc",
        type=int,
        default=default,
        help=help
        or "spawn this many local ranks, no launcher needed (default: 0, one rank of a launcher's job)",
    )


def warn_old_spellings(prog: str, argv, renamed: dict[str, str]) -> None:
    """Tells on stderr which of ``argv``'s options are old spellings (the
    parser still takes them, for one release) and what they are called now."""
    import sys

    for arg in argv if argv is not None else sys.argv[1:]:
        old = arg.split("=", 1)[0]
        if old in renamed:
            now = renamed[old]
            print(f"{prog}: {old} is now {now} (the old spelling goes in the next release)", file=sys.stderr)
