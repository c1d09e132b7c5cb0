"""Running an experiment: `experiment` (the entry point run.py calls), `modes/` (train,
eval, export, embed, linear probe), `preflight/` (the checks before anything is built),
`loop` (the training loop), `stop_signals`, `progress`, `run_lock`, `cluster` and
`distribute` (the strategy, the peers), `run_context`, `quiet` (TensorFlow's start-up
notices)."""
