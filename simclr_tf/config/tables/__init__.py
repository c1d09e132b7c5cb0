"""The tables the flags ask, without TensorFlow: run.py checks the flags before
TensorFlow is imported, and `Config`, validation and preflight read these rows
instead of comparing names.

- `modes`: one `Mode` row per --mode (what it needs, the functions it runs);
- `encoders`: one `EncoderSpec` row per --encoder (the flags it reads, which of them
  decide its variables, its rules, and its builder named as 'module:function');
- `train_modes`: one `TrainMode` row per --train_mode (what it asks of the data, the
  model and the checks; its objective named as 'module:Class');
- `evaluators`: one `EvaluatorRow` per evaluator --evaluators may name (what it needs).

Each table is written once, here; the code a row names is imported when it runs.
"""


def add_row(table, row, kind, argument):
    """Adds `row`, a `kind`, to `table` under its name (a row defined outside the
    package); returns it. `argument` names it in the error."""
    if not isinstance(row, kind):
        raise ValueError(f"register takes a {kind.__name__}. Received: {argument}={row!r}")
    table[row.name] = row
    return row


def get_row(table, name, flag):
    """The row of `table` called `name`; a ValueError naming `flag`'s values otherwise."""
    if name not in table:
        raise ValueError(f"{flag} must be one of {', '.join(table)}. Received: "
                         f"{flag}={name!r}")
    return table[name]
