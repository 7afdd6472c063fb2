"""Text to MLM batches: corpora (sources), tokenizer, masking, batches (cache, split,
iterators), prefetch (a background thread), staging (what a run reads: staged train
batches, validation sets)."""
