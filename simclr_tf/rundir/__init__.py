"""The run directory's own files: `records` (flags.json, result.json, metrics.jsonl
and the rest of the contract) and `files` (atomic writes)."""
