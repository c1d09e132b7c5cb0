"""Model weights in and out: `checkpoints/` (saving, the state file, restoring),
`official/` (the authors' released models), `teacher` (distillation's teacher),
`export` (the SavedModel), `serving` and `serving_input` (its signatures)."""
