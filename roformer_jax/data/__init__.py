"""Text to MLM batches, in the order the data walk: corpora (sources) → tokenizer → corpus
(the split and its cached token ids) → doc_pairs (rows of pairs) → masking, objectives (each
objective's targets) → batches (the train iterator, held-out pairs; hosts: each host's rows)
→ prefetch (a background thread); length_eval (held-out sets at every length) and staging
(what a run reads: staged train batches, validation sets). data_config: DataConfig."""
