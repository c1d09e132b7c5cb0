"""Every accuracy of a result carries its protocol (`protocol/<name>`): evaluator,
split and examples, the checkpoint (path relative to the run, step), the eval
preprocessing, and the evaluator's own settings. The eval and probe modes' records
are checked in tests/test_tiny_run.py, the final probe's in tests/test_experiment.py."""
import json
import os

from simclr_tf.rundir import records
from simclr_tf.weights import checkpoints

from helpers import run_fixtures
from helpers.protocols import check_protocols


def test_the_tiny_runs_accuracies_carry_their_protocol(tiny_run):
    """The kNN monitor's (queries: the 360 test examples; bank: the 1437 train
    examples) and the training accuracies (the last logging interval), all at
    ckpt-4, the checkpoint of step 4."""
    result = json.load(open(os.path.join(tiny_run.directory, "result.json")))
    protocols = check_protocols(result)
    assert sorted(protocols) == ["knn/top_1_accuracy", "train/contrast_acc",
                                 "train/supervised_acc"]
    latest = checkpoints.latest(tiny_run.directory)
    knn = protocols["knn/top_1_accuracy"]
    assert knn["checkpoint"] == dict(path=os.path.basename(latest), step=4)
    assert checkpoints.step_of(latest) == 4 == result["global_step"]
    assert (knn["evaluator"], knn["split"], knn["examples"], knn["split_examples"]) == (
        "knn", "test", 360, 360)
    assert knn["bank"] == dict(split="train", examples=1437, split_examples=1437,
                               sample=None)
    assert (knn["k"], knn["temperature"], knn["features"]) == (200, 0.07, "final_avg_pool")
    assert knn["preprocessing"] == dict(image_size=16, augmentation="none",
                                        center_crop=False, crop_proportion=None,
                                        resize="bicubic", pixels="[0, 1]")
    rankme = records.protocol_of(result, "knn/rankme")
    assert (rankme["split"], rankme["examples"], rankme["epsilon"],
            rankme["feature_dim"]) == ("train", 1437, 1e-7, run_fixtures.H_DIM)
    for name in ("train/contrast_acc", "train/supervised_acc"):
        trained = protocols[name]
        assert trained["evaluator"] == "training" and trained["split"] == "train"
        # 4 steps, a scalar every step: the last interval is step 4, one batch of 32.
        assert (trained["steps"], trained["examples"]) == ([4, 4], 32)
        assert trained["checkpoint"]["path"] == "ckpt-4"
        assert trained["checkpoint"]["step"] == 4
        assert "colour jitter (strength 0.5)" in trained["preprocessing"]["augmentation"]


def test_run_relative_paths(tmp_path):
    run = str(tmp_path / "runs" / "a")
    assert records.run_relative(os.path.join(run, "ckpt-4"), run) == "ckpt-4"
    assert records.run_relative(str(tmp_path / "runs" / "b" / "ckpt-2"), run) == \
        os.path.join("..", "b", "ckpt-2")
    elsewhere = str(tmp_path / "released" / "r50" / "variables")
    assert records.run_relative(elsewhere, run) == elsewhere
    assert records.run_relative(None, run) is None
    assert records.run_relative("gs://bucket/run/ckpt-1", run) == "gs://bucket/run/ckpt-1"
    assert records.run_relative(elsewhere, None) == elsewhere


def test_a_result_keeps_the_protocol_of_every_accuracy_it_keeps(tmp_path):
    """A later run that measures one accuracy replaces its protocol and keeps the
    other's, as it keeps the other accuracy."""
    first = {"knn/top_1_accuracy": 0.5, "protocol/knn/top_1_accuracy": {"step": 2},
             "linear_probe/pretrained": 0.9,
             "protocol/linear_probe/pretrained": {"step": 2}}
    records.write_result(str(tmp_path), "train", first)
    merged = records.write_result(str(tmp_path), "train", {
        "knn/top_1_accuracy": 0.6, "protocol/knn/top_1_accuracy": {"step": 4}})
    assert records.protocol_of(merged, "knn/top_1_accuracy") == {"step": 4}
    assert records.protocol_of(merged, "linear_probe/pretrained") == {"step": 2}
    assert records.protocol_of(merged, "eval/label_top_1_accuracy") is None
