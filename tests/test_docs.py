"""Docs stay true: every declared SCALECOMM_* variable is documented with its default."""

import dataclasses
import os
import pathlib
import re
from datetime import timedelta

import pytest

import pyscalecomm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_settings_table_is_generated_from_the_declarations():
    text = open(os.path.join(ROOT, "docs", "configuration.md")).read()
    assert pyscalecomm.params_markdown() in text, (
        "docs/configuration.md's settings table differs from the declarations in csrc/core/params.h; "
        "paste the output of: python -c 'import pyscalecomm; print(pyscalecomm.params_markdown())'"
    )


def test_the_algorithm_table_in_the_docs_is_the_builds():
    text = open(os.path.join(ROOT, "docs", "algorithms.md")).read()
    assert pyscalecomm.algorithms_markdown() in text, (
        "docs/algorithms.md's algorithm table differs from csrc/algo/registry.cc; paste the output of: "
        "python -c 'import pyscalecomm; print(pyscalecomm.algorithms_markdown())'"
    )


def test_every_codec_of_the_table_is_documented_and_nothing_else():
    text = open(os.path.join(ROOT, "docs", "compression.md")).read()
    section = text.split("## Codecs", 1)[1].split("\n\n", 2)[1]  # the table under the heading
    documented = set(
        re.findall(
            r"`([a-z0-9_]+)(?::<[a-z]+>)?`", "\n".join(r.split("|")[1] for r in section.splitlines()[2:])
        )
    )
    names = {c["name"] for c in pyscalecomm.codec_table()}
    assert documented == names, (
        f"docs/compression.md's codec table lists {sorted(documented)}; the build has {sorted(names)}"
    )
    doc = next(p for p in pyscalecomm.params() if p["name"] == "SCALECOMM_COMPRESSION")["doc"]
    missing = sorted(n for n in names if not re.search(rf"\b{n}\b", doc))
    assert not missing, f"SCALECOMM_COMPRESSION's description (csrc/core/params.h) does not name {missing}"


def test_readme_opens_with_the_two_commands():
    lines = open(os.path.join(ROOT, "README.md")).read().splitlines()[:20]
    assert "bash scripts/run_main.sh" in lines
    assert "bash scripts/run_tests.sh" in lines


def test_options_backend_config_and_params_agree():
    """Every declared group setting is one Options field and one BackendConfig
    attribute with the declared default; each process setting is neither."""
    cfg = pyscalecomm._C.BackendConfig()
    declared = [p for p in pyscalecomm.params() if p["option"]]
    fields = [f.name for f in dataclasses.fields(pyscalecomm.Options)]
    assert fields == [p["option"].removesuffix("_ms") for p in declared]
    for p in declared:
        value = getattr(cfg, p["option"])
        assert str(value) == p["default"], (p["name"], value)
    for p in pyscalecomm.params():
        if not p["option"]:
            assert not hasattr(cfg, p["name"].removeprefix("SCALECOMM_").lower()), p["name"]


def test_options_reach_the_backend_config():
    cfg = pyscalecomm._C.BackendConfig()
    assert cfg.send_ahead_bytes == -1  # automatic until the group knows its hosts
    opts = pyscalecomm.Options(
        algorithm="ring",
        transport="tcp",
        segment_bytes=4096,
        send_ahead_bytes=0,
        shm_ring_bytes=8192,
        timeout=timedelta(seconds=2.5),
    )
    opts.apply_to(cfg)
    got = (
        cfg.algorithm,
        cfg.transport,
        cfg.segment_bytes,
        cfg.send_ahead_bytes,
        cfg.shm_ring_bytes,
        cfg.timeout_ms,
    )
    assert got == ("ring", "tcp", 4096, 0, 8192, 2500)


@pytest.mark.parametrize(
    "env,value,message",
    [
        (
            "SCALECOMM_SEGMENT_BYTES",
            "12q",
            "segment_bytes (SCALECOMM_SEGMENT_BYTES)='12q' is not a size in bytes",
        ),
        ("SCALECOMM_SPIN_US", "12k", "spin_us (SCALECOMM_SPIN_US)='12k' is not a whole number"),
        ("SCALECOMM_SPIN_US", "99999999999999999999", "spin_us (SCALECOMM_SPIN_US)"),
    ],
)
def test_a_malformed_variable_is_named(monkeypatch, env, value, message):
    monkeypatch.setenv(env, value)
    cfg = pyscalecomm._C.BackendConfig()
    with pytest.raises(ValueError, match=re.escape(message)):
        cfg.load_environment()


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("ps_servers", 5, "ps_servers (SCALECOMM_PS_SERVERS) must be in [1, 4], got 5"),
        (
            "transport",
            "rdma",
            "unknown transport (SCALECOMM_TRANSPORT) 'rdma'; choose one of auto/shm/tcp/mpi",
        ),
        ("mpi", "off", "unknown mpi (SCALECOMM_MPI) 'off'"),
        ("send_ahead_bytes", -2, "send_ahead_bytes (SCALECOMM_SEND_AHEAD_BYTES) must be >= -1, got -2"),
        ("shm_ring_bytes", 4100, "multiple of 64"),
        ("timeout_ms", 0, "timeout_ms (SCALECOMM_TIMEOUT_MS) must be >= 1"),
    ],
)
def test_a_setting_out_of_range_is_named(field, value, message):
    cfg = pyscalecomm._C.BackendConfig()
    cfg.check(4)
    setattr(cfg, field, value)
    with pytest.raises(ValueError, match=re.escape(message)):
        cfg.check(4)


def test_byte_settings_take_sizes_in_the_variables_the_options_and_the_tools(monkeypatch, tmp_path):
    import subprocess
    import sys

    monkeypatch.setenv("SCALECOMM_SEGMENT_BYTES", "1M")
    monkeypatch.setenv("SCALECOMM_SHM_WINDOW_BYTES", "64KiB")
    monkeypatch.setenv("SCALECOMM_SEND_AHEAD_BYTES", "-1")  # -1 keeps its meaning (automatic)
    cfg = pyscalecomm._C.BackendConfig()
    cfg.load_environment()
    assert (cfg.segment_bytes, cfg.shm_window_bytes, cfg.send_ahead_bytes) == (1 << 20, 65536, -1)
    opts = pyscalecomm._C.BackendConfig()
    pyscalecomm.Options(segment_bytes="256KB", stage_chunk_bytes=8192).apply_to(opts)
    assert (opts.segment_bytes, opts.stage_chunk_bytes) == (262144, 8192)
    with pytest.raises(
        ValueError, match=re.escape("Options(segment_bytes='1Q'): '1Q' is not a size in bytes")
    ):
        pyscalecomm.Options(segment_bytes="1Q").apply_to(opts)
    from pyscalecomm.bench import parse_size

    assert parse_size("1KB") == parse_size("1K") == parse_size("1KiB") == 1024
    env = dict(os.environ, PYTHONPATH=ROOT)
    bad = subprocess.run(
        [sys.executable, "-m", "pyscalecomm.bench", "--nproc", "2", "-b", "1Q"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert bad.returncode == 2 and "-b: '1Q' is not a size in bytes" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr  # refused in the parent, before any rank starts


def test_unknown_variables_and_log_levels_are_named():
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=ROOT, SCALECOMM_SEGMENT_BYTE="1M", SCALECOMM_DEBUG="verbose")
    code = (
        "import pyscalecomm; c = pyscalecomm._C.BackendConfig(); c.load_environment(); c.load_environment()"
    )
    err = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    ).stderr
    assert "SCALECOMM_DEBUG=VERBOSE is not a log level (ERROR, WARN, INFO, DEBUG)" in err, err
    want = "unknown variable SCALECOMM_SEGMENT_BYTE ignored (no setting has this name; did you mean "
    want += "SCALECOMM_SEGMENT_BYTES?)"
    assert err.count(want) == 1, err  # once per process


def _markdown_files():
    root = pathlib.Path(ROOT)
    return [root / "README.md", root / "bench" / "README.md", *sorted((root / "docs").glob("*.md"))]


def test_the_docs_index_lists_every_page_and_every_link_resolves():
    root = pathlib.Path(ROOT)
    index = (root / "docs" / "README.md").read_text()
    for page in sorted((root / "docs").glob("*.md")):
        if page.name != "README.md":
            assert f"]({page.name})" in index, f"docs/README.md does not list {page.name}"
    dangling = []
    for md in _markdown_files():
        text = md.read_text()
        for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", text):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (md.parent / target).exists():
                dangling.append(f"{md.relative_to(root)} -> {target}")
        # the repository's docs cite nothing outside it
        for outside in ("design.md", "../shared", "reviews/"):
            if outside in text:
                dangling.append(f"{md.relative_to(root)} mentions {outside}, which is not in the repository")
    assert not dangling, "\n".join(dangling)
