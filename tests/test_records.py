"""simclr_tf.rundir.records: the run directory's flags and results;
simclr_tf.rundir.files: the one atomic write."""
import json
import os

import pytest

from simclr_tf.rundir import files, records
from simclr_tf.config import Config, ConfigError
from helpers.run_fixtures import RESNET, TINY, config, write_run


def test_record_paths_of_the_modes():
    assert records.record_path("/r", "flags", "train") == "/r/flags.json"
    assert records.record_path("/r", "result", "train_then_eval") == "/r/result.json"
    assert records.record_path("/r", "flags", "eval") == "/r/flags.eval.json"
    assert records.record_path("/r", "result", "linear_probe") == "/r/result.linear_probe.json"
    assert records.record_path("/r", "result", "eval", step=7) == "/r/result_7.json"
    with pytest.raises(ValueError, match="Received: kind='flag'"):
        records.record_path("/r", "flag", "train")
    with pytest.raises(ValueError, match="only a result has a step"):
        records.record_path("/r", "flags", "eval", step=7)


def test_write_json_round_trips_in_the_records_format(tmp_path):
    import numpy as np  # pylint: disable=import-outside-toplevel
    path = str(tmp_path / "result.json")
    values = {"b": 1, "a": {"x": [1, 2]}, "f": np.float32(0.5)}
    records.write_json(path, values)
    # The format every record has had (byte for byte): indented, keys sorted.
    assert open(path).read() == json.dumps(values, indent=2, sort_keys=True, default=float)
    assert records.read_json(path) == {"a": {"x": [1, 2]}, "b": 1, "f": 0.5}
    assert os.listdir(tmp_path) == ["result.json"]  # no temporary file left
    with pytest.raises(FileNotFoundError, match="No record at"):
        records.read_json(str(tmp_path / "missing.json"))


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path):
    path = str(tmp_path / "cache.npz")
    files.atomic_write(path, b"old")

    def half_then_fail(scratch):
        assert scratch.endswith(".npz") and os.path.dirname(scratch) == str(tmp_path)
        with open(scratch, "wb") as f:
            f.write(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        files.atomic_write(path, half_then_fail)
    assert open(path, "rb").read() == b"old"
    assert os.listdir(tmp_path) == ["cache.npz"]
    files.atomic_write(path, "new")  # str: text mode
    assert open(path).read() == "new"


def _warnings(monkeypatch):
    said = []
    monkeypatch.setattr(records.logging, "warning", lambda *args: said.append(args[0] % args[1:]))
    return said


def test_read_config_ignores_unknown_keys_with_one_warning_and_defaults_missing_ones(
        tmp_path, monkeypatch):
    # A ResNet's record from before --encoder and --grad_cache_chunk existed.
    values = dict(config(model_dir="/m", **RESNET).to_dict(), a_flag_from_the_future=1,
                  another_one="x")
    del values["grad_cache_chunk"], values["encoder"]  # flags added after the record
    path = str(tmp_path / "flags.json")
    records.write_json(path, values)
    said = _warnings(monkeypatch)
    recorded = records.read_config(path)
    assert len(said) == 1 and "a_flag_from_the_future, another_one" in said[0], said
    assert "resolved_stem" not in said[0]  # derived: not unknown
    defaults = Config()
    assert recorded.grad_cache_chunk == defaults.grad_cache_chunk
    assert recorded.encoder == defaults.encoder
    assert recorded.resnet_depth == RESNET["resnet_depth"] and recorded.model_dir == "/m"
    records.write_json(path, config(model_dir="/m").to_dict())
    said.clear()
    assert records.read_config(path) == config(model_dir="/m") and not said
    records.write_json(path, [1, 2])
    with pytest.raises(ValueError, match="not a JSON object of settings"):
        records.read_config(path)


def test_start_run_record_writes_the_flags_and_keeps_the_old_result(tmp_path):
    cfg = config(model_dir=str(tmp_path), mode="train")
    records.write_json(str(tmp_path / "result.json"), {"old": 1})
    records.start_run_record(cfg)
    assert records.read_config(str(tmp_path / "flags.json")) == cfg
    assert records.read_json(str(tmp_path / "result.json")) == {"old": 1}
    evaluation = config(model_dir=str(tmp_path), mode="eval")
    records.start_run_record(evaluation)  # beside training's record, not over it
    assert records.read_config(str(tmp_path / "flags.eval.json")).mode == "eval"
    assert records.read_config(str(tmp_path / "flags.json")) == cfg


@pytest.fixture(scope="module")
def old_run(tmp_path_factory):
    """A run directory written by another version: its flags.json has a key this
    version does not know and lacks one added since (a ResNet's: the versions before
    --encoder had no other)."""
    directory = tmp_path_factory.mktemp("old_run")
    write_run(directory, **RESNET)
    path = str(directory / "flags.json")
    values = records.read_json(path)
    values["a_flag_removed_since"] = True
    del values["grad_cache_chunk"]
    records.write_json(path, values)
    return directory


def test_an_old_run_directory_opens_in_open_encoder(old_run):
    from simclr_tf.weights import checkpoints  # pylint: disable=import-outside-toplevel
    model, image_size, description = checkpoints.open_encoder(str(old_run))
    assert image_size == TINY["image_size"] and description.endswith("ckpt-1")
    assert model.encoder is not None


def test_an_old_run_directory_passes_preflight(old_run):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from simclr_tf.run import preflight  # pylint: disable=import-outside-toplevel
    from simclr_tf.weights import checkpoints
    recorded = checkpoints.recorded_run_config(checkpoints.resolve(str(old_run)))
    assert recorded is not None and recorded.resnet_depth == RESNET["resnet_depth"]
    cfg = config(model_dir=str(old_run), mode="export", **RESNET)
    preflight.check(cfg, tf.distribute.get_strategy(), preflight.load_source(cfg))
    wrong = config(model_dir=str(old_run), mode="export", **dict(RESNET, resnet_depth=34))
    with pytest.raises(ConfigError, match="pass --resnet_depth=18"):  # the record is read
        preflight.check(wrong, tf.distribute.get_strategy(), preflight.load_source(wrong))


def test_write_result_merges_new_values_over_the_old(tmp_path):
    path = str(tmp_path / "result.json")
    records.write_result(str(tmp_path), "train", {"global_step": 4, "train/loss": 1.5})
    merged = records.write_result(str(tmp_path), "train", {"global_step": 4, "x": 2})
    assert merged == records.read_json(path) == {"global_step": 4, "train/loss": 1.5,
                                                 "x": 2}
    with open(path, "w") as f:
        f.write("{ damaged")
    assert records.write_result(str(tmp_path), "train", {"y": 1}) == {"y": 1}
    records.write_result(str(tmp_path), "eval", {"eval/top_1": 0.5})
    assert records.read_json(str(tmp_path / "result.eval.json")) == {"eval/top_1": 0.5}


def test_metrics_log_has_each_step_once_across_a_resume(tmp_path):
    """One JSON line per logging interval; a run resuming from step 4 drops the lines
    after 4 (steps it trains again) and a line cut short by a kill."""
    log = records.MetricsLog(str(tmp_path), start_step=0)
    for step in (2, 4, 6):
        log.append(step, {"train/contrast_loss": float(10 - step)})
    with open(tmp_path / records.METRICS_FILE, "a") as f:
        f.write('{"step": 8, "train/con')  # killed mid-write
    lines = records.read_metrics(str(tmp_path / records.METRICS_FILE))
    assert [line["step"] for line in lines] == [2, 4, 6]
    assert lines[0]["train/contrast_loss"] == 8.0 and lines[0]["time"] > 0
    resumed = records.MetricsLog(str(tmp_path), start_step=4)
    resumed.append(6, {"train/contrast_loss": 3.5})
    lines = records.read_metrics(str(tmp_path / records.METRICS_FILE))
    assert [(line["step"], line["train/contrast_loss"]) for line in lines] == [
        (2, 8.0), (4, 6.0), (6, 3.5)]
    assert open(tmp_path / records.METRICS_FILE).read().count("\n") == 3


def test_a_training_run_writes_what_tensorboard_shows_to_metrics_jsonl(tiny_run):
    """The tiny run (4 steps, no --log_every_steps: every step) has a line per step
    holding the TensorBoard scalars of that step, under the same names (and one per
    kNN evaluation: tests/test_rankme.py)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    lines = records.read_metrics(os.path.join(tiny_run.directory, records.METRICS_FILE))
    lines = [line for line in lines if "knn/top_1_accuracy" not in line]
    assert [line["step"] for line in lines] == [1, 2, 3, 4]
    scalars = {}
    for event_file in tf.io.gfile.glob(os.path.join(tiny_run.directory, "events.out.*")):
        for event in tf.compat.v1.train.summary_iterator(event_file):
            for value in event.summary.value:
                if value.tag.startswith("train/") and value.metadata.plugin_data.plugin_name == "scalars":
                    scalars[(value.tag, event.step)] = float(tf.make_ndarray(value.tensor))
    for line in lines:
        names = {name for name in line if name.startswith("train/")}
        assert {"train/contrast_loss", "train/learning_rate", "train/total_loss"} <= names
        for name in names:
            assert line[name] == pytest.approx(scalars[(name, line["step"])], rel=1e-6), name


@pytest.mark.parametrize("torn", ['{"step": 2, "train/con', '{"step": 2, "tr\n{"st'])
def test_a_torn_last_line_is_repaired_even_when_it_is_the_only_one(tmp_path, torn):
    """Issue 34, item 12: a metrics.jsonl whose only line a kill cut short was kept
    as it was, and the next run's first line appended to it: both lost."""
    path = tmp_path / records.METRICS_FILE
    path.write_text(torn)
    log = records.MetricsLog(str(tmp_path), start_step=0)
    log.append(1, {"train/contrast_loss": 2.5})
    log.append(2, {"train/contrast_loss": 2.0})
    assert [(line["step"], line["train/contrast_loss"]) for line in
            records.read_metrics(str(path))] == [(1, 2.5), (2, 2.0)]
    assert path.read_text().count("\n") == 2
    # An empty file and an intact one are left as they are.
    for text in ("", '{"step": 1, "time": 1.0}\n'):
        path.write_text(text)
        before = os.stat(path).st_mtime_ns
        records.MetricsLog(str(tmp_path), start_step=1)
        assert path.read_text() == text and os.stat(path).st_mtime_ns == before


def test_every_record_of_flags_is_checked_for_types_when_read(tmp_path):
    """Issue 34, item 3: flags.json (read_config: preflight, open_encoder, the
    scripts; flag_changes: a --model_dir error before anything is trained) and
    flags_history.json name the file and the key; results hold no flags."""
    from simclr_tf.config import RecordError  # pylint: disable=import-outside-toplevel
    flags_path = str(tmp_path / "flags.json")
    records.write_json(flags_path, dict(config(model_dir=str(tmp_path)).to_dict(),
                                        use_blur="false"))
    with pytest.raises(RecordError, match=r"flags.json' records \"use_blur\": \"false\""):
        records.read_config(flags_path)
    with pytest.raises(ConfigError, match=r"^--model_dir: .*\"use_blur\": \"false\""):
        records.flag_changes(str(tmp_path), config(model_dir=str(tmp_path)))
    records.write_json(str(tmp_path / "flags.eval.json"), dict(image_size=16.0))
    with pytest.raises(RecordError, match='"image_size": 16.0'):
        records.read_json(str(tmp_path / "flags.eval.json"))
    records.write_json(str(tmp_path / "result.json"), dict(use_blur="false"))
    assert records.read_json(str(tmp_path / "result.json")) == dict(use_blur="false")

    cfg = config(model_dir=str(tmp_path), mode="train", temperature=0.2)
    records.write_json(flags_path, config(model_dir=str(tmp_path), mode="train").to_dict())
    history = records.history_path(str(tmp_path))
    good = dict(time="t", mode="train", allow_changed_flags=True,
                changed=dict(temperature=dict(recorded=0.5, given=0.1)))
    for bad, where in ((dict(good, allow_changed_flags="yes"), '"allow_changed_flags"'),
                       (dict(good, changed=dict(use_blur=dict(recorded=True,
                                                              given="false"))),
                        '(entry 2, "given") records "use_blur"'),
                       (dict(good, changed=[]), "entry 2 is no")):
        records.write_json(history, [good, bad])
        before = open(history).read()
        with pytest.raises(ConfigError) as raised:
            records.start_run_record(cfg)
        assert raised.value.flag == "model_dir" and history in str(raised.value)
        assert where in str(raised.value), str(raised.value)
        assert open(history).read() == before  # kept, not started again
    with open(history, "w") as f:
        f.write("[{ damaged")
    with pytest.raises(ConfigError, match="flags_history.json' cannot be read"):
        records.start_run_record(cfg)
    records.write_json(history, [good])
    records.start_run_record(cfg)
    assert records.read_json(history)[1]["changed"] == {
        "temperature": dict(recorded=0.5, given=0.2)}


def test_continuing_checkpoints_the_flags_go_in_with_the_first_new_one(tmp_path):
    """Issue 34, item 6: a run continuing model_dir's checkpoints with changed flags
    writes flags.json and its history entry only when `FlagsRecord.write` is called
    (with its first checkpoint: modes/train.py); until then both are as they were."""
    directory = str(tmp_path)
    records.write_json(os.path.join(directory, "flags.json"),
                       config(model_dir=directory, mode="train").to_dict())
    before = open(os.path.join(directory, "flags.json")).read()
    changed = config(model_dir=directory, mode="train", learning_rate=1e30,
                     allow_changed_flags=True)
    record = records.start_run_record(changed, continues=True)
    assert open(os.path.join(directory, "flags.json")).read() == before
    assert not os.path.exists(records.history_path(directory)) and not record.written
    record.write()
    record.write()  # once
    assert records.read_config(os.path.join(directory, "flags.json")) == changed
    history = records.read_json(records.history_path(directory))
    assert len(history) == 1 and history[0]["changed"] == {
        "learning_rate": dict(recorded=0.5, given=1e30)}
    assert records.start_run_record(changed) is None  # a new run: written at once
