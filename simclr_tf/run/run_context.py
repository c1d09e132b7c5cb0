"""What the mode functions receive beside the Config and the strategy: a frozen
record of what preflight found (`preflight.check`) and of what `experiment` adds once
model_dir is held. TF-free."""
import dataclasses
from typing import Any, Callable, Optional


@dataclasses.dataclass(frozen=True)
class RunContext:
    """One run's context.

    Attributes:
        source: the run's `DatasetSource` (`preflight.load_source`).
        num_classes: the classes of the supervised head (the dataset's; distilling,
            the teacher's), None without labels.
        num_train_examples: the examples of --train_split (a training mode).
        teacher: what --teacher is (`teacher.resolve`, once per run: a
            `teacher.TeacherInfo`, its weights pinned), for a train mode that needs
            one.
        eval_overlap: what `preflight.check_eval_overlap` found (an `OverlapCheck`:
            the overlaps --allow_eval_overlap let through, those with a teacher's
            data, the chain of runs compared), None when the run evaluates nothing.
        write_guard: asked before each write into model_dir (the lock's check), None
            when this process does not hold model_dir.
        flags_record: the training record pending until the first new checkpoint
            (`records.start_run_record(continues=True)`), else None.
    """
    source: Any
    num_classes: Optional[int] = None
    num_train_examples: Optional[int] = None
    teacher: Any = None
    eval_overlap: Any = None
    write_guard: Optional[Callable[[], None]] = None
    flags_record: Any = None

    def replace(self, **changes):
        """This context with `changes`."""
        return dataclasses.replace(self, **changes)
