"""checkpoints.plan: recover's decisions, from plain dicts (no TensorFlow files)."""
from simclr_tf.weights.checkpoints import plan


def files(*steps, temp=(), no_index=()):
    """{step: names} as a checkpoint write leaves them."""
    out = {}
    for step in steps:
        names = [f"ckpt-{step}.data-00000-of-00001"]
        if step not in no_index:
            names.append(f"ckpt-{step}.index")
        if step in temp:
            names.append(f"ckpt-{step}_temp")
        out[step] = names
    return out


def test_order_is_newest_first_and_marks_possible_interrupted_writes():
    on_disk = files(1, 2, 3, 4, temp=(4,), no_index=(3,))
    # 2 is on disk but an intact state file does not record it; 5 is recorded only.
    order = plan.recovery_order(on_disk, {1, 3, 4, 5})
    assert order == [(5, True), (4, True), (3, True), (2, True), (1, False)]


def test_a_damaged_or_missing_state_file_proves_nothing():
    on_disk = files(1, 2, temp=(2,))
    assert plan.recovery_order(on_disk, None) == [(2, True), (1, False)]
    assert plan.maybe_interrupted(1, on_disk[1], None) is False
    assert plan.maybe_interrupted(1, on_disk[1], set()) is True  # intact, not recorded


def test_the_newest_that_restores_wins_and_a_recorded_state_stays():
    on_disk = files(1, 2)
    decided = plan.plan_recovery(on_disk, {1, 2}, {}, {}, restored=2)
    assert decided == plan.Plan(restored=2)


def test_an_unreadable_suspect_is_removed_and_a_kept_one_set_aside():
    on_disk = files(1, 2, 3, temp=(3,))
    # 3: its _temp folder remains (interrupted); 2: recorded, so kept.
    decided = plan.plan_recovery(on_disk, {1, 2}, {3: "truncated", 2: "bad index"}, {},
                                 restored=1)
    assert decided.remove == ((3, "truncated", tuple(on_disk[3])),)
    assert decided.set_aside == ((2, "bad index", tuple(on_disk[2])),)
    assert decided.rewrite_state and not decided.refuse and decided.remove_temp == ()


def test_never_delete_a_checkpoint_that_loads_as_files():
    """A suspect that reads but does not restore (another model, NaNs) is kept."""
    on_disk = files(1, 2)
    decided = plan.plan_recovery(on_disk, {1}, {}, {2: "2 tensors hold NaN"}, restored=1)
    assert decided.remove == () and [s for s, _, _ in decided.set_aside] == [2]


def test_when_none_restores_and_some_are_kept_nothing_changes():
    on_disk = files(1, 2, temp=(2,))
    decided = plan.plan_recovery(on_disk, {1}, {2: "truncated", 1: "bad"}, {},
                                 restored=None)
    assert decided.refuse and decided.restored is None
    assert [s for s, _, _ in decided.set_aside] == [1]  # named in the error
    assert decided.remove_temp == () and not decided.rewrite_state
    # Only interrupted writes: removed, and training starts again from step 0.
    decided = plan.plan_recovery(on_disk, {1}, {2: "truncated"}, {}, restored=None)
    assert decided.refuse is False and decided.set_aside == ()
    # 1 was never tried: it is neither removed nor set aside.
    assert [s for s, _, _ in decided.remove] == [2]


def test_temp_leftovers_of_finished_writes_are_removed():
    on_disk = files(1, 2, temp=(2,))
    decided = plan.plan_recovery(on_disk, {1, 2}, {}, {}, restored=2)
    assert decided.remove_temp == (("ckpt-2_temp",),)
    assert not decided.rewrite_state  # recorded, nothing removed or set aside


def test_the_state_file_is_rebuilt_when_damaged_or_not_recording_the_restored():
    on_disk = files(1)
    assert plan.plan_recovery(on_disk, None, {}, {}, restored=1).rewrite_state
    assert plan.plan_recovery(files(1, 2), {2}, {}, {}, restored=2).rewrite_state is False
    # Damaged state file: 2 is kept (not provably interrupted), set aside.
    decided = plan.plan_recovery(files(1, 2), None, {2: "truncated"}, {}, restored=1)
    assert [s for s, _, _ in decided.set_aside] == [2] and decided.rewrite_state
    assert plan.plan_recovery({}, None, {}, {}, restored=None) == plan.Plan(restored=None)
