"""Text to MLM batches: corpora (sources), tokenizer, masking, batches (cache, split,
iterators), staging (what a run reads: staged train batches, validation sets)."""
