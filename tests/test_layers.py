"""The C++ sources' layering: every include goes down the stack, and the one
executor reaches peers only through the Channel interface."""

import pathlib
import re

CSRC = pathlib.Path(__file__).resolve().parent.parent / "csrc"

# Bottom to top; a file may include its own layer and the ones below it.
LAYERS = ["core", "cuda", "transport", "comm", "algo", "select", "compress", "group", "torch"]
INCLUDE = re.compile(r'^#include "([a-z_]+)/', re.M)


def _sources():
    return sorted(p for p in CSRC.rglob("*") if p.suffix in (".h", ".cc", ".cu"))


def test_every_include_goes_down_the_layer_stack():
    arrows_up = []
    for path in _sources():
        layer = path.relative_to(CSRC).parts[0]
        assert layer in LAYERS, f"{path}: csrc/{layer}/ is not in the layer list of {__file__}"
        for included in INCLUDE.findall(path.read_text()):
            assert included in LAYERS, f"{path} includes from an unknown folder {included}/"
            if LAYERS.index(included) > LAYERS.index(layer):
                arrows_up.append(f"{path.relative_to(CSRC)} includes {included}/")
    assert not arrows_up, "includes that run up the layer stack:\n" + "\n".join(arrows_up)


def test_the_executor_reaches_peers_only_through_the_channel():
    for name in ("executor.h", "executor.cc"):
        text = (CSRC / "algo" / name).read_text()
        assert "Communicator" not in text, f"algo/{name} names the Communicator"
        assert "communicator()" not in text, f"algo/{name} reaches a channel's Communicator"


def test_no_channel_is_resolved_by_a_cast():
    casts = []
    for path in _sources():
        for m in re.finditer(r"(static|dynamic|reinterpret)_cast<\s*\w*Channel\s*[&*]", path.read_text()):
            casts.append(f"{path.relative_to(CSRC)}: {m.group(0)}")
    assert not casts, (
        "channels resolved by a cast (ask the Channel: queuedChannel(), communicator()):\n" + "\n".join(casts)
    )


def test_only_the_adapter_sees_torch():
    # Everything below csrc/torch/ (the codecs included) builds with CMake
    # without torch, and is tested there.
    seen = []
    for path in _sources():
        if path.relative_to(CSRC).parts[0] == "torch":
            continue
        for m in re.finditer(r"^#include <(ATen|c10|torch|pybind11)/[^>]*>", path.read_text(), re.M):
            seen.append(f"{path.relative_to(CSRC)}: {m.group(0)}")
    assert not seen, "torch headers below the adapter:\n" + "\n".join(seen)
