"""scripts/benchmark.py runs (a smoke test, not a benchmark): every part, tiny config."""
import json

import pytest

from helpers.scripts import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmark")


@pytest.mark.large  # 20 s (ResNet-18 x0.125)
@pytest.mark.bfloat16  # the matmul peak in bfloat16: oneDNN aborts the process under the cap
def test_all_parts_run_on_the_smoke_preset(bench, tmp_path):
    # The subject is the parts' machinery, not the ResNet: the tiny encoder. The train
    # part draws its views on the device (the synthetic batch of --augment_on=device:
    # the sources, uint8).
    path = tmp_path / "bench.json"
    results = bench.main(["all", "--preset=smoke", "--encoder=tiny", "--augment_on=device",
                          f"--json={path}"])
    saved = json.loads(path.read_text())
    assert set(saved) >= {"train", "input", "ntxent", "matmul_peak_gflops_per_sec"}
    (row,) = results["train"]
    assert row["views_per_sec"] > 0 and row["images_per_sec"] == row["views_per_sec"] / 2
    assert row["forward_gflops_per_view"] > 0 and 0 < row["mfu"]
    assert {(r["source"], r["augment_on"]) for r in results["input"]} == {
        ("decoded", "host"), ("decoded", "device"), ("encoded", "host"), ("encoded", "device")}
    assert [r["batch_size"] for r in results["ntxent"]] == [16, 32]


@pytest.mark.extra_large  # 67 s (ResNet-18 x0.125); two children of 31 s on the tiny encoder
@pytest.mark.bfloat16
def test_memory_part_runs_each_step_in_a_fresh_process(bench, tmp_path):
    # Also the train step with gradient caching and bf16. The subject is the part's
    # machinery (a fresh process per step, its rows), not the ResNet: the tiny encoder
    # (docs/testing.md); nor the augmentations: on the host (the benchmark's batch for
    # --augment_on=device is test_all_parts_run_on_the_smoke_preset's, device views
    # drawn per chunk test_grad_cache's; tracing them took half of each child's time).
    results = bench.main(["memory", "--preset=smoke", "--encoder=tiny",
                          "--grad_cache_chunk=2", "--batch_sizes=8",
                          "--mixed_precision=bfloat16",
                          f"--json={tmp_path / 'm.json'}"])
    plain, chunked = results["memory"]
    assert (plain["train_batch_size"], plain["grad_cache_chunk"]) == (2, 0)
    assert (chunked["train_batch_size"], chunked["grad_cache_chunk"]) == (8, 2)
    for row in (plain, chunked):
        assert row["peak_memory_mb"] > row["memory_before_step_mb"] > 0
        assert row["input_batch_mb"] > 0 and row["loss"] == row["loss"]  # finite, not NaN
