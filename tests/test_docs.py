"""Docs stay true: every declared SCALECOMM_* variable is documented with its
default; the docs index and its links resolve; every README promise names
the test that checks it."""

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


def _sections_of(text):
    """What a reference can name in a page: its headings and the bold labels that open list items."""
    heads = re.findall(r"^#+ (.*)$", text, re.M) + re.findall(r"^\s*- \*\*([^*]+)\*\*", text, re.M)
    return [" ".join(h.replace("`", "").split()) for h in heads]


def test_every_section_a_doc_cites_exists():
    """`docs/x.md, "Section"` in a page points at a heading (or a list item's bold label) of x.md."""
    root = pathlib.Path(ROOT)
    journal = sorted((root / "docs" / "journal").glob("*.md"))
    dangling = []
    for md in _markdown_files() + [root / "CONTRIBUTING.md"]:
        flat = " ".join(md.read_text().split())
        for doc, section in re.findall(r"((?:docs/|bench/)?[\w.-]+\.md),? \"([^\"]+)\"", flat):
            target = next((p for p in (root / doc, root / "docs" / doc, md.parent / doc) if p.exists()), None)
            if target is None or target in journal:
                continue
            wanted = " ".join(section.replace("`", "").split())
            if not any(h.startswith(wanted) or wanted in h for h in _sections_of(target.read_text())):
                dangling.append(f'{md.relative_to(root)} cites {doc}, "{section}": no such section')
    assert not dangling, "\n".join(dangling)


# What the README promises a user, each with what checks it: a test
# (tests/FILE::FUNCTION), a C++ test file, or the script that runs it.
README_PROMISES = {
    # the opening
    "bash scripts/run_main.sh": [
        "tests/test_train.py::test_smoke_sweep_writes_every_output_and_backends_share_a_loss_curve"
    ],
    "bash scripts/run_tests.sh": ["tests/test_docs.py::test_readme_opens_with_the_two_commands"],
    "model = DDP(model)  # trains exactly as with gloo": [
        "tests/test_ddp.py::test_ddp_two_ranks_equals_gloo_bitwise"
    ],
    "the package registers the backend when torch is imported": [
        "tests/test_registration.py::test_init_process_group_finds_the_backend_without_importing_pyscalecomm"
    ],
    "`TORCH_DEVICE_BACKEND_AUTOLOAD=0`, `import pyscalecomm` first": [
        "tests/test_registration.py::test_torch_s_autoload_switch_turns_it_off"
    ],
    "so a script needs no variables there": [
        "tests/test_mpi.py::test_mpirun_needs_neither_variables_nor_an_import",
        "tests/test_mpi.py::test_slurm_variables_alone_rendezvous",
    ],
    "is reduced in place, without a copy": [
        "tests/test_direct.py::test_numpy_arrays_are_reduced_in_place_and_come_back_as_themselves"
    ],
    "torchrun --nproc-per-node 2 examples/ddp_train.py": [
        "tests/test_examples.py::test_the_ddp_example_runs_under_torchrun_without_the_import"
    ],
    "mpirun -n 2 python examples/allreduce_arrays.py": [
        "tests/test_examples.py::test_the_array_example_runs_under_mpirun"
    ],
    # the table of what works
    "| collectives |": [
        "tests/test_conformance.py::test_every_collective_matches_gloo_on",
        "tests/test_rooted_and_alltoall.py::test_reduce_gather_scatter_reduce_scatter_all_to_all",
        "tests/test_rooted_and_alltoall.py::test_send_recv_isend_irecv_and_batch",
        "tests/test_collectives.py::test_non_contiguous_tensors_are_copied_in_and_out_like_gloo",
        "scripts/run_tests.sh",  # PyTorch's own suite, a subset
    ],
    "| algorithms |": [
        "tests/test_collectives.py::test_every_allreduce_algorithm_matches_gloo",
        "tests/test_autotune.py::test_online_auto_explores_then_every_rank_runs_the_same_winner",
        "tests/test_autotune.py::test_tune_show_prints_the_sizes_left_to_auto",
        "tests/test_rooted_and_alltoall.py::test_each_collective_lists_its_algorithms_and_refuses_others_by_name",
        "tests/test_bench.py::test_simulate_prices_every_algorithm_and_names_a_winner",
    ],
    "| profiling |": [
        "tests/test_rooted_and_alltoall.py::test_profiler_names_collective_and_algorithm",
        "tests/test_timeline.py::test_timeline_has_collective_and_step_spans_per_rank",
        "tests/test_stats.py::test_stats_count_every_call_in_its_size_bucket_with_its_busbw",
    ],
    "| emulated cluster |": [
        "tests/test_cluster.py::test_two_hosts_of_two_ranks_share_memory_inside_and_tcp_between",
        "tests/test_cluster.py::test_each_host_computes_at_its_cpu_share_and_a_straggler_at_its_own",
    ],
    "| dtypes |": ["tests/test_collectives.py::test_allreduce_matches_gloo_every_dtype_op_and_count"],
    "| sizes |": [
        "tests/test_properties.py::test_random_arguments_give_the_exact_result_or_a_clear_error",
        "tests/test_faults.py::test_more_than_2_pow_31_elements",
    ],
    "| transports |": [
        "tests/test_collectives.py::test_transport_is_chosen_per_peer_and_logged",
        "tests/test_collectives.py::test_forced_transports",
        "tests/test_mpi.py::test_mpirun_two_emulated_hosts_use_shm_inside_and_mpi_between",
    ],
    "| MPI |": [
        "tests/test_mpi.py::test_mpirun_needs_neither_variables_nor_an_import",
        "tests/test_mpi.py::test_mpirun_mpi_passthrough_algorithm",
        "tests/test_bench.py::test_bench_under_mpirun_with_mpi_baseline",
    ],
    "| arrays |": [
        "tests/test_direct.py::test_numpy_arrays_are_reduced_in_place_and_come_back_as_themselves",
        "tests/test_direct.py::test_what_cannot_be_reduced_in_place_is_refused_by_name",
    ],
    "| deterministic |": [
        "tests/test_deterministic.py::test_every_configuration_gives_the_left_fold_in_rank_order_bit_for_bit",
        "tests/test_deterministic.py::test_ddp_trains_to_the_same_bits_with_other_algorithms_and_buckets",
        "tests/test_deterministic.py::test_a_deterministic_group_refuses_what_does_not_fold_in_rank_order",
    ],
    "| compression |": [
        "tests/test_compress.py::test_every_codec_matches_its_torch_oracle",
        "tests/test_compress.py::test_state_dict_round_trip_restores_the_residuals",
        "tests/test_compress.py::test_digits_reach_uncompressed_accuracy_with_topk_sign_and_powersgd_plus_error_feedback",
        "tests/cpp/test_compressed_group.cc",
    ],
    "| training driver |": [
        "tests/test_train.py::test_smoke_sweep_writes_every_output_and_backends_share_a_loss_curve",
        "tests/test_strategies.py::test_every_strategy_trains_on_both_backends_with_ddps_loss_curve",
        "tests/test_adaptive.py::test_every_plan_computes_the_gradient_of_the_whole_batch",
        "tests/test_adaptive.py::test_the_driver_trains_the_plan_with_ddps_loss_curve_and_reports_it",
        "tests/test_train.py::test_runs_under_mpirun",
    ],
    "| parameter server |": [
        "tests/test_ps.py::test_sync_matches_ddp_on_the_same_data",
        "tests/test_ps.py::test_ssp_never_lets_a_worker_lead_the_slowest_by_more_than_k",
        "tests/test_ps.py::test_a_dead_worker_is_dropped_and_training_goes_on_without_it",
    ],
    "| diagnosis |": [
        "tests/test_doctor.py::test_the_whole_report_runs_here_with_a_measured_check",
        "tests/test_cli.py::test_every_tool_says_its_version",
        "tests/test_cli.py::test_every_option_says_what_it_does_its_default_and_its_unit",
        "tests/test_cli.py::test_the_tools_spell_shared_options_alike",
    ],
    "| benchmark |": [
        "tests/test_bench.py::test_bench_every_collective_in_and_out_of_place_with_json_and_plot",
        "tests/test_bench.py::test_bench_defaults_report_a_median_round_with_its_spread",
    ],
    "| semantics |": [
        "tests/test_collectives.py::test_async_work_future_and_sequence_numbers",
        "tests/test_collectives.py::test_torch_distributed_debug_detail_works_on_our_groups",
        "tests/test_faults.py::test_wait_timeout_poisons_the_group",
    ],
    "| launch |": [
        "tests/test_collectives.py::test_device_routing_cpu_scalecomm",
        "tests/test_collectives.py::test_subgroups",
        "tests/test_group_ops.py::test_split_makes_independent_scalecomm_groups",
    ],
    "| faults |": [
        "tests/test_faults.py::test_mismatched_shapes_dtypes_and_ops_fail_every_rank_with_both_values",
        "tests/test_faults.py::test_rank_killed_mid_allreduce_raises_on_every_survivor_quickly",
        "tests/test_faults.py::test_survivors_shrink_the_group_and_go_on",
        "tests/test_security.py::test_tcp_peers_must_share_the_secret",
        "tests/soak.py",
    ],
    "| fault-tolerant training |": [
        "tests/test_torchft.py::test_abort_from_another_thread_releases_the_waiters_and_a_new_quorum_works_at_once",
        "tests/test_torchft.py::test_torchft_s_loop_runs_on_scalecomm_not_gloo",
    ],
    "Not yet: sparse allreduce (raises NotImplementedError)": [
        "tests/test_faults.py::test_local_argument_errors_are_value_errors_and_leave_the_group_usable"
    ],
    "the queued channel they\nimplement runs the whole algorithm grid on a CPU emulation": [
        "tests/cpp/test_queued_channel.cc",
        "tests/cpp/test_device_group.cc",
    ],
    "The GPU tests\nrun with `bash scripts/gpu_check.sh`": [
        "scripts/gpu_check.sh",
        "tests/gpu/test_cuda_collectives.py",
    ],
    "tested with\ntorch 2.14.1 CUDA build and 2.13.0 CPU-only build": ["scripts/torch_compat.sh"],
}
# The headline numbers: each row's table and command are in the docs.
README_NUMBERS = {
    "8-byte `dist.all_reduce`, 2 ranks": ("docs/performance.md", "## Small collectives"),
    "`pyscalecomm.allreduce` on NumPy, 8 B - 1 MiB, 2 ranks": (
        "docs/performance.md",
        "### The direct API against mpi4py",
    ),
    "allreduce 64 KiB - 256 MiB, 2 ranks": (
        "docs/performance.md",
        "## Shared memory against Open MPI, DeepSpeed",
    ),
    "allreduce 16 - 256 MiB, 2 ranks": (
        "docs/performance.md",
        "## Shared memory against Open MPI, DeepSpeed",
    ),
    "allreduce bus bandwidth 1 - 256 MiB, 2 ranks": ("docs/performance.md", "## Allreduce bandwidth"),
    "DDP on scikit-learn's digits, 2 ranks, the main job": ("docs/training.md", "## The main job"),
    "DDP on 4 emulated hosts at 1 Gbit/s, top-k 1 % compression": ("docs/performance.md", "## DDP training"),
}


def _flat(text):
    return " ".join(text.split())


def test_every_readme_promise_names_what_checks_it():
    readme = (pathlib.Path(ROOT) / "README.md").read_text()
    problems = []
    for promise, backing in README_PROMISES.items():
        if _flat(promise) not in _flat(readme):
            problems.append(f"README no longer says {promise!r}: update README_PROMISES")
        for item in backing:
            path, _, function = item.partition("::")
            source = pathlib.Path(ROOT, path)
            if not source.exists():
                problems.append(f"{promise!r}: {path} does not exist")
            elif function and not re.search(rf"^def {function}\(", source.read_text(), re.M):
                problems.append(f"{promise!r}: {path} has no test {function}")
    # every row of "What works today" is a promise with its tests
    works = readme.split("## What works today", 1)[1].split("\n\n", 2)[1]
    for row in works.splitlines()[2:]:
        label = "| " + row.split("|")[1].strip() + " |"
        if label not in README_PROMISES:
            problems.append(f"README's row {label} names no test in README_PROMISES")
    # every headline number has its table and command in the docs
    headline = readme.split("| what (date) |", 1)[1].split("\n\n", 1)[0]
    for row in headline.splitlines()[2:]:
        what = row.split("|")[1].strip()
        key = next((k for k in README_NUMBERS if what.startswith(k)), None)
        if key is None:
            problems.append(f"README's headline row {what!r} names no table in README_NUMBERS")
            continue
        doc, heading = README_NUMBERS[key]
        text = (pathlib.Path(ROOT) / doc).read_text()
        section = text.split(heading, 1)[1].split("\n## ", 1)[0] if heading in text else ""
        if "python" not in section and "bash " not in section:
            problems.append(f"{what!r}: {doc} has no section {heading!r} with its command")
    assert not problems, "\n".join(problems)
