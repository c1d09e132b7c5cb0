"""The tables the flags ask, without TensorFlow: run.py checks the flags before
TensorFlow is imported, and `Config`, validation and preflight read these rows
instead of comparing names.

- `modes`: one `Mode` row per --mode (what it needs, the functions it runs);
- `encoders`: one `EncoderSpec` row per --encoder (the flags it reads, which of them
  decide its variables, its rules, and its builder named as 'module:function').

Each table is written once, here; the code a row names is imported when it runs.
The table of the training objectives (--train_mode), as TF-free, sits beside the
objectives it names, in `simclr_tf/objectives/__init__.py`.
"""
