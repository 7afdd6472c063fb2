"""MLM pre-training: config (schema, from_dict, diff), step (the pure update), loop (the
trainer), runtime (devices, hosts, signals, terminal), checkpoints, metrics, optim."""
