"""The training objectives of --train_mode, one module each (`pretrain`, `finetune`,
`distill`) on `base.Objective`; their rows, what each asks of the rest of the code,
are the TF-free table `simclr_tf.config.tables.train_modes`, beside the mode and encoder
tables."""
