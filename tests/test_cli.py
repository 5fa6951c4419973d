"""Every command-line tool's ``--help`` is a reference a user can act on:
each option says what it does, its default, and, for a quantity, its unit;
defaults print as a user would type them (``5us``, ``100Gbit``), not as a
float's repr."""

import argparse
import importlib
import re

import pytest

# (module whose main() parses the command line, what a user types)
TOOLS = [
    ("pyscalecomm.bench", "python -m pyscalecomm.bench"),
    ("pyscalecomm.tune", "python -m pyscalecomm.tune"),
    ("pyscalecomm.doctor", "python -m pyscalecomm doctor"),
    ("pyscalecomm.train.cli", "python -m pyscalecomm.train"),
    ("pyscalecomm.simulate", "python -m pyscalecomm.simulate"),
    ("pyscalecomm.cluster", "python -m pyscalecomm.cluster"),
    ("pyscalecomm.profile", "python -m pyscalecomm.profile"),
    ("pyscalecomm.trace", "python -m pyscalecomm.trace"),
]

# Options that hold a quantity with a unit, by their destination's name.
QUANTITY = {"time", "timeout", "ms", "mb", "bytes", "minbytes", "maxbytes", "stepbytes", "size", "alpha"}
QUANTITY |= {"rate", "bandwidth", "overhead", "gamma", "segment", "burst"}
# Words a help text may use to give the unit (bytes may be given by the
# suffixes a size takes: 8, 1K, 64M).
UNIT = re.compile(
    r"\b(seconds?|ms|us|ns|bytes?|KiB|MiB|GiB|1K|64K|1M|64M|bits?|Gbit|gbit|Gbps|GB/s|MB/s|"
    r"samples|per rank|steps?)\b|\d(s|us|ms|K|M|G|gbit|Gbit)\b"
)
# A default printed as Python's repr of a float (4.9999999999999996e-06,
# 12500000000.0) is not what a user would type.
FLOAT_REPR = re.compile(r"default: [0-9.]+e[-+]?\d+|default: \d{7,}\.\d")


class _Parsed(Exception):
    pass


def parser_of(module: str) -> argparse.ArgumentParser:
    """The parser the tool's main() builds, caught when it parses."""
    caught = []

    def catch(self, args=None, namespace=None):
        caught.append(self)
        raise _Parsed

    mod = importlib.import_module(module)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(argparse.ArgumentParser, "parse_args", catch)
        mp.setattr(argparse.ArgumentParser, "parse_known_args", catch)
        with pytest.raises(_Parsed):
            mod.main([])
    return caught[0]


def formatted_help(parser, action) -> str:
    """What ``--help`` prints for the option ("" where it prints nothing)."""
    if not (action.help or "").strip():
        return ""
    text = parser._get_formatter()._expand_help(action)
    return " ".join(text.split())


@pytest.mark.parametrize("module,command", TOOLS, ids=[t[0] for t in TOOLS])
def test_every_option_says_what_it_does_its_default_and_its_unit(module, command):
    parser = parser_of(module)
    problems = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            continue
        name = action.option_strings[-1] if action.option_strings[0].startswith("-") else action.dest
        text = formatted_help(parser, action)
        if not text.strip():
            problems.append(f"{name}: no help text")
            continue
        takes_value = action.nargs != 0
        if takes_value and "default" not in text.lower():
            problems.append(f"{name}: the help does not give the default ({text!r})")
        if FLOAT_REPR.search(text):
            problems.append(f"{name}: the default prints as a float's repr ({text!r})")
        if takes_value and QUANTITY & set(action.dest.split("_")) and not UNIT.search(text):
            problems.append(f"{name}: a quantity whose help gives no unit ({text!r})")
    assert not problems, f"{command} --help:\n  " + "\n  ".join(problems)


def test_the_checks_catch_what_they_look_for():
    """The rules above fail on the help texts they exist to catch."""
    p = argparse.ArgumentParser()
    p.add_argument("--alpha", type=float, default=5e-6, help="latency per message (default: %(default)s)")
    (action,) = [a for a in p._actions if a.dest == "alpha"]
    text = formatted_help(p, action)
    assert FLOAT_REPR.search(text) and not UNIT.search(text)
    assert UNIT.search("latency per message (default: 5us)")
    assert UNIT.search("largest size in bytes (default: 64M)")
    assert not UNIT.search("how many (default: 4)")
