"""What `CheckpointState.recover` does with model_dir's checkpoints, decided without I/O.

Which checkpoint restores needs loading attempts (a readable one may still not fit or
hold NaNs), so the decision is in two pure steps around the I/O of `recover`:

1. `recovery_order(steps_on_disk, recorded)`: the steps to try, newest first, each
   marked whether it may be an interrupted write;
2. `plan_recovery(steps_on_disk, recorded, unreadable, not_restored, restored)`:
   from what the attempts found, what to remove, set aside and rewrite.

The rules (those of `CheckpointState`'s docstring):

- a step may be an interrupted write when its `_temp` folder is still there, it has
  no index file, or an intact state file does not record it (TensorFlow records a
  checkpoint only after writing it); a damaged or missing state file proves nothing;
- a suspect that does not read is an interrupted write: its files are removed;
- any other checkpoint that does not load (unreadable, not fitting, not finite) is
  kept: set aside whole, never deleted, because it may be repaired or be of
  another model;
- when none restores and some are kept, nothing is changed and recover stops;
- `_temp` leftovers of finished writes are removed;
- the state file is rewritten when it was damaged or missing, when anything was
  removed or set aside, or when it does not record the restored checkpoint.
"""
import dataclasses
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple

from simclr_tf.weights.checkpoints.files import _BASE  # ckpt-<step>.index, .data-*, _temp/


def maybe_interrupted(step, names, recorded):
    """Whether `step` may be a write that never finished (see the module docstring).

    Args:
        step: the step.
        names: its file names in model_dir (possibly none).
        recorded: the steps an intact state file records, or None when the state
            file is damaged or missing.
    """
    if any("_temp" in name for name in names) or f"{_BASE}-{step}.index" not in names:
        return True
    return recorded is not None and step not in recorded


def recovery_order(steps_on_disk: Mapping[int, Sequence[str]],
                   recorded: Optional[Set[int]]) -> List[Tuple[int, bool]]:
    """The steps to try, newest first, with whether each may be an interrupted write.

    Args:
        steps_on_disk: {step: names of its files in model_dir}.
        recorded: the steps an intact state file records (those without files
            included), or None when it is damaged or missing.

    Returns:
        `[(step, suspect), ...]`, newest first. A suspect is read in full before it is
        restored: a partial write must never leave half-assigned weights behind.
    """
    steps = set(steps_on_disk) | set(recorded or ())
    return [(step, maybe_interrupted(step, steps_on_disk.get(step, ()), recorded))
            for step in sorted(steps, reverse=True)]


@dataclasses.dataclass(frozen=True)
class Plan:
    """What recover does after its attempts.

    Attributes:
        restored: the step restored, or None.
        remove: `(step, reason, file names)` of interrupted writes, to delete.
        set_aside: `(step, reason, file names)` of kept checkpoints that do not load,
            to move to `unloadable/`.
        remove_temp: the `_temp` leftovers of finished writes, to delete (one tuple
            of names per step).
        rewrite_state: whether to rebuild the state file up to `restored`.
        refuse: nothing restores and some checkpoints are kept: change nothing (not
            even `remove`) and stop, naming `set_aside`.
    """
    restored: Optional[int]
    remove: Tuple[Tuple[int, str, Tuple[str, ...]], ...] = ()
    set_aside: Tuple[Tuple[int, str, Tuple[str, ...]], ...] = ()
    remove_temp: Tuple[Tuple[str, ...], ...] = ()
    rewrite_state: bool = False
    refuse: bool = False


def plan_recovery(steps_on_disk: Mapping[int, Sequence[str]],
                  recorded: Optional[Set[int]],
                  unreadable: Dict[int, str],
                  not_restored: Dict[int, str],
                  restored: Optional[int]) -> Plan:
    """What to remove, set aside and rewrite, from what recover's attempts found.

    Args:
        steps_on_disk: {step: names of its files in model_dir}.
        recorded: the steps an intact state file records, or None when it is damaged
            or missing.
        unreadable: {step: reason} of the tried steps whose files do not read.
        not_restored: {step: reason} of the tried steps that read but did not
            restore (another model, NaN or infinite values): kept whatever they are,
            since they load as files.
        restored: the step that restored, or None.

    Returns:
        A `Plan` (rules in the module docstring).
    """
    interrupted, kept = [], []
    for step, suspect in recovery_order(steps_on_disk, recorded):
        names = tuple(steps_on_disk.get(step, ()))
        if step in unreadable:
            (interrupted if suspect else kept).append((step, unreadable[step], names))
        elif step in not_restored:
            kept.append((step, not_restored[step], names))
    if restored is None and kept:
        return Plan(restored=None, remove=tuple(interrupted), set_aside=tuple(kept),
                    refuse=True)
    done = {step for step, _, _ in interrupted}
    remove_temp = tuple(temp for temp in (
        tuple(name for name in names if "_temp" in name)
        for step, names in steps_on_disk.items() if step not in done) if temp)
    rewrite = restored is not None and (recorded is None or bool(interrupted or kept)
                                        or restored not in recorded)
    return Plan(restored=restored, remove=tuple(interrupted), set_aside=tuple(kept),
                remove_temp=remove_temp, rewrite_state=rewrite)
