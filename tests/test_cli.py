"""The command-line tools as a user meets them: each says its version; its
``--help`` is a reference to act on (what each option does, its default
and, for a quantity, its unit, printed as a user would type it: ``5us``,
``100Gbit``, not a float's repr); shared options are spelt alike; and every
command the docs show parses, with no hidden option or old spelling."""

import argparse
import functools
import importlib
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

import pyscalecomm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}

# Each tool as a user names it, and the module whose main() parses its command line.
MODULES = {
    "bench": "pyscalecomm.bench",
    "tune": "pyscalecomm.tune",
    "doctor": "pyscalecomm.doctor",
    "train": "pyscalecomm.train.cli",
    "simulate": "pyscalecomm.simulate",
    "cluster": "pyscalecomm.cluster",
    "profile": "pyscalecomm.profile",
    "trace": "pyscalecomm.trace",
}

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


@pytest.mark.parametrize("tool", sorted(MODULES))
def test_every_tool_says_its_version(tool):
    module = "pyscalecomm" if tool == "doctor" else f"pyscalecomm.{tool}"
    out = subprocess.run([sys.executable, "-m", module, "--version"], env=ENV, capture_output=True, text=True)
    assert out.stdout.strip() == f"scalecomm {pyscalecomm.__version__}", out.stdout + out.stderr


def test_the_tools_spell_shared_options_alike():
    from pyscalecomm import bench, tune
    from pyscalecomm.train import cli

    # torchrun's spelling of the local rank count, everywhere a tool spawns ranks
    assert bench.parse_args(["--nproc-per-node", "2"]).nproc == 2
    assert tune.parse_args(["--nproc-per-node", "2"]).nproc == 2
    assert cli.parse_args(["--nproc-per-node", "3"]).nproc == 3
    # -o is the bench's reduce op only; tune writes with --out (as train does)
    assert tune.parse_args(["--out", "t.txt"]).output == "t.txt"
    with pytest.raises(SystemExit):
        tune.parse_args(["-o", "t.txt"])


@pytest.mark.parametrize(
    "tool,default", [("bench", "(default: 64M)"), ("tune", "(default: scalecomm-tuning.txt)")]
)
def test_help_shows_the_defaults(tool, default):
    out = subprocess.run(
        [sys.executable, "-m", f"pyscalecomm.{tool}", "--help"], env=ENV, capture_output=True, text=True
    )
    assert default in " ".join(out.stdout.split()).replace("- ", "-"), out.stdout  # argparse wraps at hyphens


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


@pytest.mark.parametrize("tool", sorted(MODULES))
def test_every_option_says_what_it_does_its_default_and_its_unit(tool):
    parser = parser_of(MODULES[tool])
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
    assert not problems, f"{tool} --help:\n  " + "\n  ".join(problems)


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


# ---------------------------------------------------------------------------
# Every command the docs show a user parses, with no hidden or old spelling.

COMMAND = re.compile(r"(?:python3? -m pyscalecomm(?:\.(\w+))?|scalecomm-(\w+)|scalecomm (doctor|info))\b")
# Where the docs stand for something the reader fills in, the command is not checked.
PLACEHOLDER = re.compile(r"\.\.\.|<|\[|\$|\bN\b")
# The architecture's example of adding an algorithm names one the build does not have.
HYPOTHETICAL = {"halving"}


@functools.cache
def doc_commands():
    """(doc, tool, argv) for every scalecomm tool command in the docs' code
    and the tools' help texts: fenced and indented blocks (backslash
    continuations joined) and inline code."""
    import shlex

    from test_docs import _markdown_files

    docs = [*_markdown_files(), pathlib.Path(ROOT, "CONTRIBUTING.md")]
    texts = [(str(p.relative_to(ROOT)), p.read_text()) for p in docs]
    # the tools' own --help texts (their module docstrings) show commands as indented code
    texts += [
        (f"{m} --help", importlib.import_module(m).__doc__ or "") for m in sorted(set(MODULES.values()))
    ]
    found = []
    for name, text in texts:
        pieces = re.findall(r"```[^\n]*\n(.*?)```", text, re.S)
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        pieces += re.findall(r"(?:^ {4}.*\n?)+", prose, re.M)  # indented code
        pieces = [p.replace("\\\n", " ") for p in pieces]
        pieces += re.findall(r"`([^`\n]+)`", prose)
        for piece in pieces:
            for line in piece.splitlines():
                for m in COMMAND.finditer(line):
                    tool = m.group(1) or m.group(2) or "doctor"  # (doctor and info are doctor's commands)
                    after = line[m.end() :] + " "
                    rest = re.split(r"\s(?:--|\||&&|;|>|#)(?:\s|$)|\s+/\s+", after)[0]
                    if tool not in MODULES or PLACEHOLDER.search(rest) or HYPOTHETICAL & set(rest.split()):
                        continue
                    argv = ([m.group(3)] if m.group(3) else []) + shlex.split(rest)
                    if tool == "cluster" and after.startswith(rest + " -- "):
                        argv += ["--", "true"]  # the command the hosts run: not the cluster's to parse
                    if argv:  # (a bare name is a mention, not a command)
                        found.append((name, tool, argv))
    return found


def test_the_docs_show_commands_of_every_tool():
    tools = {tool for _, tool, _ in doc_commands()}
    assert {"bench", "tune", "train", "simulate", "cluster", "profile", "doctor"} <= tools, tools


@pytest.mark.parametrize("tool", sorted(MODULES))
def test_every_command_in_the_docs_parses_with_no_hidden_or_old_option(tool, capsys):
    parser = parser_of(MODULES[tool])
    hidden = {s for a in parser._actions if a.help == argparse.SUPPRESS for s in a.option_strings}
    module = importlib.import_module(MODULES[tool])
    problems = []
    for doc, _, argv in (c for c in doc_commands() if c[1] == tool):
        shown = f"{doc}: {tool} {' '.join(argv)}"
        # Without a GPU the tools refuse --device cuda, and without DeepSpeed its
        # baseline (an optional package): there only the options are checked.
        no_gpu = "cuda" in argv and not __import__("torch").cuda.is_available()
        no_deepspeed = any("deepspeed" in a for a in argv) and importlib.util.find_spec("deepspeed") is None
        checked = hasattr(module, "parse_args") and not no_gpu and not no_deepspeed
        try:
            (module.parse_args if checked else parser.parse_args)(argv)
        except SystemExit as done:
            if done.code == 0:  # --help, --version
                continue
            problems.append(f"{shown}: {capsys.readouterr().err.strip().splitlines()[-1]}")
            continue
        err = capsys.readouterr().err
        if " is now " in err:
            problems.append(f"{shown}: an old spelling ({err.strip()})")
        used = {a.split("=", 1)[0] for a in argv if a.startswith("-")}
        if used & hidden:
            problems.append(f"{shown}: {sorted(used & hidden)} not in --help")
    assert not problems, "\n".join(problems)
