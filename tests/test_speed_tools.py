"""The speed instruments (issue 65): the CPU kind, the bfloat16 hint, the step's
profile in parts (scripts/step_profile.py) and the side-by-side arms of
`benchmark.py versus` (scripts/side_by_side.py). Each is tried on the fault it exists
to catch: a part that swallows another's ops, a ratio from a failed or non-finite run,
a hint where bfloat16 would not help."""
import json
import math
import os
import signal
import sys
import threading
import time

import pytest

from helpers.scripts import load_script, SCRIPTS
from simclr_tf.run import machine

sys.path.insert(0, SCRIPTS)
import script_io  # noqa: E402  (scripts/: the children that stop with the script)

EPYC = """processor\t: 0
model name\t: AMD EPYC 9R14 96-Core Processor
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512dq avx512_vnni avx512_bf16 avx512vl
processor\t: 1
model name\t: AMD EPYC 9R14 96-Core Processor
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512dq avx512_vnni avx512_bf16 avx512vl
"""
XEON = "model name\t: Intel(R) Xeon(R) Platinum 8488C\nflags\t\t: avx2 avx512f " \
       "avx512_vnni avx512_bf16 amx_bf16 amx_tile\n"
AVX2_ONLY = "model name\t: AMD EPYC 7R13 Processor\nflags\t\t: sse2 avx avx2 fma\n"


@pytest.fixture
def cpuinfo(tmp_path, monkeypatch):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)

    def write(text):
        path = tmp_path / f"cpuinfo{len(list(tmp_path.iterdir()))}"
        path.write_text(text)
        return str(path)
    return write


# ------------------------------------------------------------------ the CPU kind


def test_the_cpu_kind_names_the_model_and_the_kernels_flags(cpuinfo, monkeypatch):
    path = cpuinfo(EPYC)
    kind = machine.cpu_kind(path)
    assert kind.startswith("AMD EPYC 9R14 96-Core Processor, ")
    assert kind.endswith(" cores, avx2/avx512f/avx512_vnni/avx512_bf16")
    assert machine.cpu_kind(cpuinfo(AVX2_ONLY)).endswith(", avx2")
    assert machine.cpu_kind(cpuinfo("model name\t: old\nflags\t: sse2\n")).endswith(
        "no AVX2")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # a capped run says so
    assert machine.cpu_kind(path).endswith("avx512_bf16, ONEDNN_MAX_CPU_ISA=AVX2")


def test_native_bfloat16_is_avx512_bf16_or_amx_and_not_under_a_lower_cap(cpuinfo,
                                                                         monkeypatch):
    assert machine.native_bfloat16(cpuinfo(EPYC)) == "avx512_bf16"
    assert machine.native_bfloat16(cpuinfo(XEON)) == "amx_bf16"
    assert machine.native_bfloat16(cpuinfo(AVX2_ONLY)) is None
    assert machine.native_bfloat16(cpuinfo("")) is None  # no flags line
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # oneDNN emulates bf16 then
    assert machine.native_bfloat16(cpuinfo(EPYC)) is None
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")
    assert machine.native_bfloat16(cpuinfo(EPYC)) == "avx512_bf16"


def test_the_bfloat16_hint_only_where_it_would_help_and_was_not_chosen(cpuinfo):
    epyc = cpuinfo(EPYC)
    hint = machine.bfloat16_hint(mixed_precision="none", given=False, all_cpu=True,
                                 path=epyc)
    assert hint.startswith("this CPU computes bfloat16 natively (avx512_bf16): "
                           "--mixed_precision=bfloat16 trains about ")
    assert "docs/performance.md#bfloat16-on-a-cpu" in hint
    assert machine.BFLOAT16_SPEEDUP in hint and "\n" not in hint
    # Chosen (float32 given explicitly, or bfloat16 already), a GPU or TPU run, a CPU
    # without native bfloat16: no hint.
    assert machine.bfloat16_hint(mixed_precision="none", given=True, all_cpu=True,
                                 path=epyc) is None
    assert machine.bfloat16_hint(mixed_precision="bfloat16", given=True, all_cpu=True,
                                 path=epyc) is None
    assert machine.bfloat16_hint(mixed_precision="none", given=False,
                                 all_cpu=False, path=epyc) is None  # a GPU or TPU run
    avx2 = cpuinfo(AVX2_ONLY)
    assert machine.bfloat16_hint(mixed_precision="none", given=False, all_cpu=True,
                                 path=avx2) is None
    # all_cpu, as the training run asks it (preflight.all_cpu: also the oneDNN and
    # XLA checks'), by the strategy's devices.
    from types import SimpleNamespace
    from simclr_tf.run import preflight

    def strategy(*devices):
        return SimpleNamespace(extended=SimpleNamespace(worker_devices=devices))
    assert preflight.all_cpu(strategy("/job:localhost/replica:0/task:0/device:CPU:0",
                                      "/job:localhost/replica:0/task:0/device:CPU:1"))
    assert not preflight.all_cpu(strategy("/job:localhost/replica:0/task:0/device:GPU:0"))
    assert not preflight.all_cpu(strategy("/job:worker/replica:0/task:0/device:TPU:0"))


# ------------------------------------------------------------------ the profile's parts


@pytest.fixture(scope="module")
def step_profile():
    return load_script("step_profile")


# Op names as TensorFlow 2.21's trace of our pretraining step shows them (R18, LARS,
# a tf.range loop of steps), with the part each belongs to.
TRACE_NAMES = {
    "while/body/_1/while/simclr_1/resnet_1/block_group4_1/block2_1/conv2_1/conv2d_1/"
    "convolution:_MklNativeConv2D": "convolution forward",
    "simclr_1/resnet_1/stem_1/conv_1/conv2d_1/convolution:_MklNativeConv2D":
        "convolution forward",
    "while/body/_1/gradient_tape/while/simclr_1/resnet_1/block_group4_1/block1_1/"
    "shortcut_conv_1/conv2d_1/convolution/Conv2DBackpropInput:"
    "_MklNativeConv2DBackpropInput": "convolution backward (input)",
    "while/body/_1/gradient_tape/while/simclr_1/resnet_1/block_group1_1/block2_1/conv2_1/"
    "conv2d_1/convolution/Conv2DBackpropFilter:_MklNativeConv2DBackpropFilter":
        "convolution backward (filter)",
    "while/body/_1/gradient_tape/while/simclr_1/resnet_1/block_group2_1/block2_1/bn1_1/"
    "ReluGrad:ReluGrad": "batch norm",
    "simclr_1/resnet_1/block_group3_1/block1_1/shortcut_bn_1/batch_normalization_1/Cast/"
    "ReadVariableOp:ReadVariableOp": "batch norm",
    "while/body/_1/while/simclr_1/resnet_1/stem_1/bn_1/FusedBatchNormV3:"
    "_MklNativeFusedBatchNormEx": "batch norm",
    "while/body/_1/gradient_tape/while/simclr_1/projection_head_1/nl_2_1/bn_1/"
    "batch_normalization_1/FusedBatchNormGradV3:_MklNativeFusedBatchNormGradV3": "heads",
    "gradient_tape/simclr_1/projection_head_1/nl_0_1/dense_1/MatMul/MatMul_1:_MklMatMul":
        "heads",
    "simclr_1/head_supervised_1/dense_1/BiasAdd:_MklNativeFusedMatMul": "heads",
    "while/body/_1/while/supervised_loss/SparseSoftmaxCrossEntropyWithLogits:"
    "SparseSoftmaxCrossEntropyWithLogits": "heads",
    "while/body/_1/while/nt_xent/l2_normalize_1/Sum:Sum": "NT-Xent and the gather",
    "while/body/_1/gradient_tape/while/nt_xent/MatMul_1:_MklMatMul":
        "NT-Xent and the gather",
    "while/body/_1/while/lars/AssignSubVariableOp_55:AssignSubVariableOp":
        "optimizer update",
    "lars/norm_25/Sum:Sum": "optimizer update",
    "while/body/_1/while/weight_decay/L2Loss_3:L2Loss": "optimizer update",
    "while/body/_1/while/views/concat:ConcatV2": "views (on device)",
    "while/body/_1/while/views/depthwise:DepthwiseConv2dNative": "views (on device)",
    "IteratorGetNextOp::DoCompute": "input",
    "while/body/_1/gradient_tape/while/simclr_1/resnet_1/block_group2_1/block1_1/conv1_1/"
    "Slice_1:Slice": "elementwise, backward",
    "AddN_9:AddN": "elementwise, backward",
    "simclr_1/resnet_1/block_group3_1/block1_1/Pad:Pad": "elementwise, forward",
    "simclr_1/resnet_1/block_group1_1/block1_1/Relu:Relu": "elementwise, forward",
    "while/body/_1/while/grad_norm/global_norm/L2Loss_23:L2Loss": "metrics and checks",
    "metrics_1/ArgMax:ArgMax": "metrics and checks",
    "Timestamp_1:Timestamp": "metrics and checks",
    "cond/_18/Less:Less": "other",
    "a_new_scope/Frobnicate:Frobnicate": "other",
}


def test_each_op_of_a_real_trace_is_in_its_part(step_profile):
    got = {name: step_profile.op_part(name) for name in TRACE_NAMES}
    assert got == TRACE_NAMES
    assert set(TRACE_NAMES.values()) == set(step_profile.PARTS)
    # The executor's own events are not ops.
    assert step_profile.op_part("ExecutorState::Process") is None
    assert step_profile.op_part("EagerExecute") is None


def test_the_summary_sums_each_part_and_the_time_no_op_ran(step_profile):
    ps = 10 ** 12
    conv = "simclr_1/resnet_1/stem_1/conv_1/conv2d_1/convolution:Conv2D"
    events = [
        (conv, 0, 2 * ps),                                  # 0-2 s
        ("lars/mul_3:Mul", 1 * ps, 2 * ps),                 # 1-3 s, overlaps the conv
        ("while/body/_1/while/nt_xent/Exp:Exp", 5 * ps, 1 * ps),  # 5-6 s
        ("IteratorGetNextOp::DoCompute", 7 * ps, ps // 2),   # 7-7.5 s
    ]
    summary = step_profile.summarise(events, steps=2, wall_seconds=10.0)
    rows = {r["part"]: r for r in summary["rows"]}
    assert [r["part"] for r in summary["rows"]] == list(step_profile.PARTS)
    assert rows["convolution forward"]["seconds_per_step"] == pytest.approx(1.0)
    assert rows["optimizer update"]["seconds_per_step"] == pytest.approx(1.0)
    assert rows["NT-Xent and the gather"]["seconds_per_step"] == pytest.approx(0.5)
    assert rows["input"]["seconds_per_step"] == pytest.approx(0.25)
    assert summary["op_seconds_per_step"] == pytest.approx(2.75)
    assert sum(r["share"] for r in summary["rows"]) == pytest.approx(1.0)
    # Busy 0-3, 5-6, 7-7.5: 4.5 of 10 s; 5.5 s with no op running, 2.75 per step.
    assert summary["no_op_seconds_per_step"] == pytest.approx(2.75)
    assert summary["wall_seconds_per_step"] == pytest.approx(5.0)


@pytest.mark.large  # a traced tiny step, ~15 s
def test_a_traced_step_puts_every_op_in_a_part(tmp_path):
    bench = load_script("benchmark")
    summary = bench.bench_profile(
        dict(encoder="tiny", image_size=16, train_batch_size=8, use_blur=False,
             num_proj_layers=2), warmup=1, windows=1, steps=2,
        logdir=str(tmp_path / "trace"), input_images=8)
    rows = {r["part"]: r for r in summary["rows"]}
    for part in ("convolution forward", "convolution backward (filter)", "batch norm",
                 "heads", "NT-Xent and the gather", "optimizer update", "metrics and checks"):
        assert rows[part]["seconds_per_step"] > 0, part
    # The first conv's input gradient is not computed (the images need none), the
    # second's is.
    assert rows["convolution backward (input)"]["ops_per_step"] >= 1
    assert rows["other"]["share"] < 0.05, rows["other"]
    assert 0 <= summary["no_op_seconds_per_step"] <= summary["wall_seconds_per_step"]
    assert summary["host_views_core_seconds_per_step"] > 0


# ------------------------------------------------------------------ side by side


@pytest.fixture(scope="module")
def side():
    return load_script("side_by_side")


def test_arms_are_parsed_and_bad_ones_named(side, tmp_path):
    arms = side.parse_arms(["ours:", "bf16:--mixed_precision=bfloat16",
                            "inter1:TF_NUM_INTEROP_THREADS=1 -ONEDNN_MAX_CPU_ISA"])
    assert [a["name"] for a in arms] == ["ours", "bf16", "inter1"]
    assert arms[1]["flags"] == ["--mixed_precision=bfloat16"]
    assert arms[2]["env"] == {"TF_NUM_INTEROP_THREADS": "1"}
    assert arms[2]["unset"] == ["ONEDNN_MAX_CPU_ISA"]
    for spec, words in [("ours", "NAME:SPEC"), ("a b:", "not a word"),
                        ("x:lowercase=1", "neither a flag"),
                        ("authors:authors", "--authors_dir")]:
        with pytest.raises(ValueError, match=words):
            side.parse_arms([spec])
    with pytest.raises(ValueError, match="taken"):
        side.parse_arms(["a:", "a:--steps=1"])
    tf2 = tmp_path / "tf2"
    tf2.mkdir()
    (tf2 / "objective.py").write_text("")
    with pytest.raises(ValueError, match="--authors_python"):
        side.parse_arms(["authors:authors"], str(tf2), str(tmp_path / "no_python"))
    (authors,) = side.parse_arms(["authors:authors"], str(tf2), sys.executable)
    assert authors["authors"]


def test_the_authors_arm_gets_the_same_model_and_refuses_what_it_cannot_run(side, tmp_path):
    tf2 = tmp_path / "tf2"
    tf2.mkdir()
    (tf2 / "objective.py").write_text("")
    (authors,) = side.parse_arms(["authors:authors"], str(tf2), sys.executable)
    timing = dict(warmup=1, windows=3, steps=1, matmul_size=256, matmul_seconds=0.1)
    command = side.arm_command(authors, dict(resnet_depth=18, image_size=32,
                                             use_blur=False), timing, "/tmp/r.json")
    assert command[:2] == [sys.executable, side.AUTHORS_SCRIPT]
    assert {"--resnet_depth=18", "--image_size=32", "--use_blur=false", "--windows=3",
            "--json=/tmp/r.json"} <= set(command)
    with pytest.raises(side.ArmFailed, match="--augment_on"):
        side.arm_command(authors, dict(augment_on="device"), timing, "/tmp/r.json")
    (ours,) = side.parse_arms(["bf16:--mixed_precision=bfloat16"])
    command = side.arm_command(ours, dict(mixed_precision="none"), timing, "/tmp/r.json")
    # The arm's flag comes last: it wins over the shared model's.
    assert command.index("--mixed_precision=bfloat16") > command.index(
        "--mixed_precision=none")


def _fake_arm(side, monkeypatch, script):
    """An arm whose process is `script` (python -c), given the json path."""
    (arm,) = side.parse_arms(["fake:"])
    monkeypatch.setattr(side, "arm_command", lambda arm, overrides, timing, path: [
        sys.executable, "-c", script, path])
    return arm


@pytest.mark.parametrize("step", ["float('nan')", "float('inf')", "0", "-1"])
def test_a_run_without_a_finite_positive_time_is_an_error_never_a_ratio(side, monkeypatch,
                                                                       step):
    arm = _fake_arm(side, monkeypatch, (
        "import json, sys; json.dump(dict(train=[dict(step_seconds=" + step + ", "
        "window_seconds=[1.0], mfu=0.5, compute_dtype='float32', "
        "train_gflops_per_view=1.0, views_per_sec=1.0, load_average_after=[0])], "
        "matmul_peak_gflops_per_sec=dict(float32=1.0)), open(sys.argv[1], 'w'))"))
    with pytest.raises(side.ArmFailed, match="not a positive finite number"), \
            script_io.Children() as children:
        side.run_arm(arm, {}, {}, children)


def test_a_failed_arm_names_its_command_and_output(side, monkeypatch):
    arm = _fake_arm(side, monkeypatch, "print('the reason'); raise SystemExit(3)")
    with pytest.raises(side.ArmFailed) as info, script_io.Children() as children:
        side.run_arm(arm, {}, {}, children)
    assert "arm fake: exit status 3" in str(info.value)
    assert "the reason" in str(info.value) and "command:" in str(info.value)


def test_ratios_pair_arms_within_a_round_and_the_table_says_so(side):
    arms = side.parse_arms(["ours:", "bf16:--mixed_precision=bfloat16"])
    rounds = [dict(ours=dict(step_seconds=8.0, mfu=0.9),
                   bf16=dict(step_seconds=4.0, mfu=0.8)),
              dict(ours=dict(step_seconds=10.0, mfu=0.7),
                   bf16=dict(step_seconds=4.0, mfu=0.8))]
    got = side.ratios(rounds, "ours")
    assert got == {"ours": [1.0, 1.0], "bf16": [2.0, 2.5]}
    text = side.table(arms, rounds, "a CPU")
    assert text.startswith("CPU: a CPU;")
    assert "| bf16 | 4.000, 4.000 | 2.000, 2.500 | 2.250 | 0.80 |" in text


def test_the_authors_mfu_is_their_time_on_our_flops_and_peak(side, tmp_path):
    tf2 = tmp_path / "tf2"
    tf2.mkdir()
    (tf2 / "objective.py").write_text("")
    arms = side.parse_arms(["authors:authors", "ours:"], str(tf2), sys.executable)
    rounds = [dict(authors=dict(step_seconds=10.0),
                   ours=dict(step_seconds=8.0, compute_dtype="float32",
                             train_gflops_per_view=3.0, views_per_step=512.0,
                             matmul_peak=dict(float32=200.0)))]
    side.fill_authors_mfu(rounds, arms)
    assert rounds[0]["authors"]["mfu"] == pytest.approx(3.0 * 512 / 10.0 / 200.0)
    assert math.isfinite(rounds[0]["authors"]["mfu"])


@pytest.mark.large  # two tiny processes of benchmark.py train, ~40 s
def test_versus_runs_each_arm_in_its_own_process(tmp_path):
    bench = load_script("benchmark")
    path = tmp_path / "v.json"
    results = bench.main(["versus", "--preset=smoke", "--encoder=tiny", "--rounds=1",
                          "--arm=ours:",
                          # an environment variable, and run.py's input pipeline
                          "--arm=inter1:TF_NUM_INTEROP_THREADS=1 --data=dataset",
                          "--warmup=1", "--windows=1", "--steps=1", f"--json={path}"])
    versus = json.loads(path.read_text())["versus"]
    assert [a["name"] for a in versus["arms"]] == ["ours", "inter1"]
    assert versus["ratios"]["ours"] == [1.0]
    assert results["versus"]["rounds"][0]["inter1"]["step_seconds"] > 0
    assert "| inter1 |" in versus["table"]


def test_an_arm_that_cannot_run_is_refused_before_any_arm_runs(tmp_path, capsys):
    bench = load_script("benchmark")
    tf2 = tmp_path / "tf2"
    tf2.mkdir()
    (tf2 / "objective.py").write_text("")
    with pytest.raises(SystemExit) as info:  # the authors' code has no device views
        bench.main(["versus", "--preset=smoke", "--augment_on=device",
                    f"--authors_dir={tf2}", f"--authors_python={sys.executable}",
                    f"--json={tmp_path / 'v.json'}"])
    assert info.value.code == 2
    assert "--arm=authors: the authors' baseline has no --augment_on" in (
        capsys.readouterr().err)
    assert not (tmp_path / "v.json").exists()


def test_a_failed_arm_ends_versus_with_one_error_and_no_table(side, monkeypatch, capsys,
                                                             tmp_path):
    bench = load_script("benchmark")
    monkeypatch.setattr(side, "run_arm", lambda arm, overrides, timing, children: (
        _ for _ in ()).throw(
        side.ArmFailed(f"arm {arm['name']}: exit status 1, no result")))
    monkeypatch.setitem(sys.modules, "side_by_side", side)
    with pytest.raises(SystemExit) as info:
        bench.main(["versus", "--preset=smoke", "--arm=ours:", "--rounds=1",
                    f"--json={tmp_path / 'v.json'}"])
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert "benchmark.py versus: error: arm ours: exit status 1" in err
    assert not (tmp_path / "v.json").exists()


def test_a_stop_reaches_the_running_arm_and_ends_the_comparison(side, monkeypatch):
    """SIGTERM to the script while an arm runs: the arm's process gets it and exits
    (it would run on otherwise), then `Stopped`; no result of that arm."""
    arm = _fake_arm(side, monkeypatch, (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))\n"
        "time.sleep(60)"))
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
    start = time.monotonic()
    with pytest.raises(script_io.Stopped) as info, script_io.Children() as children:
        side.run_arm(arm, {}, {}, children)
    assert info.value.signum == signal.SIGTERM
    assert time.monotonic() - start < 30  # the child stopped, not waited out


# ------------------------------------------------------- every option reaches its part


@pytest.mark.parametrize("part, option", [
    ("profile", "--compare=none,bfloat16"), ("versus", "--train_modes=finetune"),
    ("input", "--resnet_depth=18"), ("ntxent", "--logdir=/tmp/x"),
    ("memory", "--skip_update"), ("memory", "--skip"), ("memory", "--data=dataset"),
    ("train", "--arm=a:"), ("train", "--logdir=/tmp/x"), ("all", "--rounds=3"),
    ("versus", "--input_images=8"),
])
def test_an_option_a_part_does_not_read_is_refused(part, option, capsys, tmp_path):
    """Before, `profile` took --data and --skip_update and measured without them, and
    `versus` took --data and gave it to no arm: an option that the part does not read
    (abbreviated too) is one line, exit 2, before anything is measured."""
    bench = load_script("benchmark")
    with pytest.raises(SystemExit) as info:
        bench.parse_args([part, "--preset=smoke", option, f"--json={tmp_path / 'b.json'}"])
    assert info.value.code == 2
    name = option.split("=")[0].replace("--skip", "--skip_update").replace(
        "_update_update", "_update")
    assert f"{name} does nothing in `{part}`: only " in capsys.readouterr().err


def test_profile_refuses_jit_compile_whose_ops_it_cannot_split(capsys):
    """Before: a table of zeros and a 99.5% idle step (the XLA cluster in no part)."""
    bench = load_script("benchmark")
    with pytest.raises(SystemExit) as info:
        bench.parse_args(["profile", "--preset=smoke", "--jit_compile=true"])
    assert info.value.code == 2
    assert "--jit_compile: profile splits the step into TensorFlow's ops" in (
        capsys.readouterr().err)
    bench.parse_args(["profile", "--preset=smoke", "--jit_compile=false"])  # plain: fine


RECORDED = ["--data=dataset", "--dataset=digits", "--skip_update",
            "--teacher_width_multiplier=0.25", "--train_mode=distill"]


@pytest.mark.parametrize("part", ["train", "profile", "versus"])
def test_each_part_gives_the_options_it_takes_to_what_it_measures(part, side, monkeypatch,
                                                                  tmp_path):
    """The measured function of each part is replaced by a recorder: the data, the
    update left out and the teacher reach it (before: `profile` and `versus` dropped
    --data and --skip_update). `versus`' arms are parsed back as `train`'s command
    lines: the values arrive there too."""
    bench = load_script("benchmark")
    calls = []
    monkeypatch.setattr(bench, "matmul_peak", lambda *a, **k: 1.0)
    monkeypatch.setattr(bench, "bench_train", lambda overrides, **kw: calls.append(
        dict(kw, overrides=overrides)) or dict(config={}, teacher=None))
    monkeypatch.setattr(bench, "_print_table", lambda *a, **k: None)
    monkeypatch.setattr(bench, "bench_profile", lambda overrides, **kw: calls.append(
        dict(kw, overrides=overrides)) or dict(
            config={}, data=kw["data"], skip_update=kw["skip_update"], rows=[],
            untraced_step_seconds=1.0, wall_seconds_per_step=1.0, op_seconds_per_step=1.0,
            no_op_seconds_per_step=0.0))
    monkeypatch.setitem(sys.modules, "side_by_side", side)
    monkeypatch.setattr(side, "run", lambda arms, overrides, **kw: calls.append(dict(
        commands=[side.arm_command(arm, overrides, kw["timing"], "r.json")
                  for arm in arms])) or {})
    arms = ["--arm=a:"] if part == "versus" else []
    bench.main([part, "--preset=smoke", *arms, *RECORDED, f"--json={tmp_path / 'b.json'}"])
    (call,) = calls
    if part == "versus":
        (command,) = call["commands"]
        assert command[2] == "train"
        _, settings, overrides = bench.parse_args(command[2:])
        call = dict(settings, teacher_overrides=settings["teacher"], overrides=overrides)
    assert call["data"] == "dataset" and call["skip_update"] is True
    assert call["teacher_overrides"] == {"teacher_width_multiplier": 0.25}
    assert call["overrides"]["dataset"] == "digits"
    assert call["overrides"]["train_mode"] == "distill"


def test_the_authors_arm_refuses_the_options_their_baseline_cannot_take(side):
    tf_dir = os.path.join(os.path.dirname(SCRIPTS), "tests")  # only named in the command
    arm = dict(name="authors", authors=True, python=sys.executable, authors_dir=tf_dir,
               flags=[], env={}, unset=[])
    timing = dict(warmup=1, windows=1, steps=1)
    for option, words in [(dict(data="dataset"), "--data=dataset cannot reach it"),
                          (dict(skip_update=True), "has no --skip_update"),
                          (dict(teacher_width_multiplier=0.25),
                           "has no --teacher_width_multiplier")]:
        with pytest.raises(side.ArmFailed, match=words):
            side.arm_command(arm, option, timing, "r.json")


def test_versus_leaves_out_a_bfloat16_arm_on_a_cpu_without_native_bfloat16(monkeypatch,
                                                                           capsys):
    """docs/performance.md's command on an AVX2-only EPYC ran its bfloat16 arm 17
    minutes, with no line (the float32 arm 4). Now that arm is left out with one line;
    a bfloat16 reference cannot be, and is refused; with native bfloat16 all run."""
    bench = load_script("benchmark")
    arms = ["--arm=ours:", "--arm=bf16:--mixed_precision=bfloat16"]
    monkeypatch.setattr(bench.machine, "native_bfloat16", lambda *a: None)
    _, settings, _ = bench.parse_args(["versus", "--preset=smoke", *arms])
    assert [a["name"] for a in settings["arms"]] == ["ours"]
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.startswith("benchmark.py versus: arm bf16 trains in bfloat16, which this "
                           "CPU (") and line.endswith("; left out")
    for argv in (["--arm=bf16:--mixed_precision=bfloat16", "--arm=ours:"],
                 ["--mixed_precision=bfloat16", "--arm=a:", "--arm=b:X=1"]):
        with pytest.raises(SystemExit) as info:
            bench.parse_args(["versus", "--preset=smoke", *argv])
        assert info.value.code == 2
        assert "the reference arm cannot be left out" in capsys.readouterr().err
    monkeypatch.setattr(bench.machine, "native_bfloat16", lambda *a: "avx512_bf16")
    _, settings, _ = bench.parse_args(["versus", "--preset=smoke", *arms])
    assert [a["name"] for a in settings["arms"]] == ["ours", "bf16"]


@pytest.mark.large  # a traced tiny step on run.py's pipeline, ~20 s
def test_profile_keeps_what_its_logdir_held_and_measures_the_options_given(tmp_path):
    """Before, `profile --logdir=<a run's folder>` deleted the folder (its checkpoints
    lost) and measured the step with the update whatever --skip_update said."""
    bench = load_script("benchmark")
    logdir = tmp_path / "run"
    (logdir / "plugins" / "profile" / "old").mkdir(parents=True)
    (logdir / "ckpt-3.index").write_text("a checkpoint")
    old_trace = logdir / "plugins" / "profile" / "old" / "h.xplane.pb"
    old_trace.write_bytes(b"an earlier profile: not read")
    os.utime(old_trace, (time.time() + 3600,) * 2)  # newer than the trace to come
    summary = bench.bench_profile(
        dict(encoder="tiny", image_size=16, train_batch_size=8, use_blur=False,
             num_proj_layers=2, dataset="digits"), warmup=1, windows=1, steps=2,
        logdir=str(logdir), input_images=8, skip_update=True, data="dataset")
    assert (logdir / "ckpt-3.index").read_text() == "a checkpoint"
    assert old_trace.read_bytes() == b"an earlier profile: not read"
    rows = {r["part"]: r for r in summary["rows"]}
    # The update's ops gone (LARS over the tiny model's variables: dozens a step); the
    # weight-decay term of the loss, which the part counts too, is left (4 ops).
    assert rows["optimizer update"]["ops_per_step"] <= 4, rows["optimizer update"]
    assert rows["convolution forward"]["seconds_per_step"] > 0
    assert summary["data"] == "dataset" and summary["skip_update"] is True


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_reaches_the_memory_part_s_running_step(signum, monkeypatch, tmp_path):
    """`memory`'s children ran through subprocess.run: a SIGTERM or SIGHUP to the
    script left the running step's process on its own. Now it gets SIGTERM, and the
    part stops (`script_io.Stopped`)."""
    bench = load_script("benchmark")
    got = tmp_path / "got"
    monkeypatch.setattr(bench, "memory_command", lambda run, teacher: [
        sys.executable, "-c",
        "import signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda s, f: (open({str(got)!r}, 'w').write("
        "str(s)), sys.exit(143)))\n"
        "time.sleep(60)"])
    # SIGHUP at its default, also when the suite runs under nohup (which script_io
    # respects: test_script_io's test_a_hangup_under_nohup_changes_nothing).
    hangup = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    threading.Timer(1.0, os.kill, (os.getpid(), signum)).start()
    start = time.monotonic()
    try:
        with pytest.raises(script_io.Stopped) as info:
            bench.bench_memory(dict(train_batch_size=4), [4])
    finally:
        signal.signal(signal.SIGHUP, hangup)
    assert info.value.signum == signum and time.monotonic() - start < 30
    assert got.read_text() == str(int(signal.SIGTERM))


def test_a_dataset_that_cannot_be_read_is_one_line(capsys, tmp_path):
    """`profile --data=dataset --dataset=no_such_dataset` profiled a synthetic batch
    (the dataset never read); now read, it is refused: one line, exit 2, before a
    model is built, not a traceback."""
    bench = load_script("benchmark")
    with pytest.raises(SystemExit) as info:
        bench.main(["profile", "--preset=smoke", "--encoder=tiny", "--data=dataset",
                    "--dataset=no_such_dataset", f"--logdir={tmp_path / 'trace'}",
                    f"--json={tmp_path / 'p.json'}"])
    assert info.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("benchmark.py: error: --dataset: Unknown dataset "
                           "'no_such_dataset'")
    assert not (tmp_path / "trace").exists() and not (tmp_path / "p.json").exists()


def test_an_arm_with_a_flag_train_refuses_is_named_before_any_arm_runs(capsys):
    """A typo in the second arm's flags stopped `versus` only after the first arm ran
    (minutes); now before any runs, naming the arm."""
    bench = load_script("benchmark")
    for arm, words in (("b:--mixed_precison=bfloat16", "unrecognized arguments: "
                                                        "--mixed_precison=bfloat16"),
                       ("b:--logdir=/tmp/x", "--logdir does nothing in `train`")):
        with pytest.raises(SystemExit) as info:
            bench.parse_args(["versus", "--preset=smoke", "--arm=a:", f"--arm={arm}"])
        assert info.value.code == 2
        (line,) = [l for l in capsys.readouterr().err.splitlines() if "error" in l]
        assert "error: --arm=b: " in line and words in line, line


@pytest.mark.parametrize("part", ["input", "ntxent", "memory"])
def test_the_other_parts_give_their_options_to_what_they_measure(part, monkeypatch,
                                                                  tmp_path):
    """As above for `input`, `ntxent` and `memory` (recorders in place of them)."""
    bench = load_script("benchmark")
    calls = []
    monkeypatch.setattr(bench, "_print_table", lambda *a, **k: None)
    monkeypatch.setattr(bench, "bench_input", lambda size, **kw: calls.append(
        dict(kw, size=size)) or {})
    monkeypatch.setattr(bench, "bench_ntxent", lambda batch: calls.append(batch) or {})
    monkeypatch.setattr(bench, "bench_memory", lambda overrides, sizes, teacher: calls.append(
        (overrides, sizes, teacher)) or [])
    json_path = f"--json={tmp_path / 'b.json'}"
    if part == "input":
        bench.main(["input", "--image_sizes=24", "--input_images=5", json_path])
        assert {(c["size"], c["num_images"]) for c in calls} == {(24, 5)}
        assert len(calls) == 4  # decoded / encoded, host / device
    elif part == "ntxent":
        bench.main(["ntxent", "--batch_sizes=8,4", json_path])
        assert calls == [4, 8]
    else:
        bench.main(["memory", "--batch_sizes=8", "--resnet_depth=18", "--grad_cache_chunk=2",
                    "--teacher_width_multiplier=0.25", json_path])
        ((overrides, sizes, teacher),) = calls
        assert overrides == dict(resnet_depth=18, grad_cache_chunk=2) and sizes == [8]
        assert teacher == {"teacher_width_multiplier": 0.25}


def test_an_option_given_beats_the_preset_however_it_is_spelt():
    """`--wind=5` (argparse's abbreviation) beside --preset=smoke: the preset's 2 won
    (the option was looked for by its full name in argv)."""
    bench = load_script("benchmark")
    for spelt in (["--windows=5"], ["--windows", "5"], ["--wind=5"]):
        _, settings, _ = bench.parse_args(["train", "--preset=smoke", *spelt])
        assert settings["windows"] == 5, spelt
