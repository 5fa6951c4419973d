"""Docs stay true: every declared SCALECOMM_* variable is documented with its default."""

import os

import pyscalecomm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_parameter_is_documented_with_its_default():
    text = open(os.path.join(ROOT, "docs", "configuration.md")).read()
    for name, default, _doc in pyscalecomm.params():
        row = [line for line in text.splitlines() if line.startswith(f"| `{name}` |")]
        assert row, f"{name} is missing from docs/configuration.md"
        shown = f"`{default}`" if default else "(empty)"
        assert shown in row[0], f"{name}: default {default!r} not in {row[0]}"


def test_readme_opens_with_the_two_commands():
    lines = open(os.path.join(ROOT, "README.md")).read().splitlines()[:20]
    assert "bash scripts/run_main.sh" in lines
    assert "bash scripts/run_tests.sh" in lines


def test_options_fields_match_the_backend_config():
    cfg = pyscalecomm._C.BackendConfig()
    assert cfg.send_ahead_bytes == -1  # automatic until the group knows its hosts
    opts = pyscalecomm.Options(
        algorithm="ring", transport="tcp", segment_bytes=4096, send_ahead_bytes=0, shm_ring_bytes=8192
    )
    opts.apply_to(cfg)
    got = (cfg.algorithm, cfg.transport, cfg.segment_bytes, cfg.send_ahead_bytes, cfg.shm_ring_bytes)
    assert got == ("ring", "tcp", 4096, 0, 8192)
