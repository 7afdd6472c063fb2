"""RoFormer-base with the MLM pre-training recipe of the paper (Su et al. 2021, sec. 4).

BERT-base (12 layers, 768 wide, 12 heads) with RoPE in place of the absolute position
table, trained as in the paper's "pre-training language modeling" experiment: batch 64,
sequence length 512, AdamW, 100k steps, lr 1e-5 (the paper uses BookCorpus + Wikipedia).
The paper states no warm-up or decay; we use BERT's: linear warm-up over 1% of the steps,
then linear decay to 0. The default source
here is WikiText-103 through the optional `datasets` package; point data.source at your own
text files with --config.data.source=/path/to/*.txt.

Run (a GPU or TPU host; see docs/training.md, "Several hosts", for several):
  python experiments/train_mlm.py --config=configs/roformer_base.py --workdir=/tmp/roformer_base
Smoke test on a CPU: --config=configs/roformer_base.py:runlocal

Expect: not run here. On the 2-core CPU of the README one float32 step of only 8 x 128
tokens takes about 5 s (benchmarks/train_step.py): this is a GPU/TPU job.
"""

from configs import base


def get_config(arg=None):
    config = base.get_base_config("base")
    config.data.source = "hf:wikitext:wikitext-103-raw-v1"
    config.data.seq_len = 512
    config.data.vocab_size = 30522  # bert-base-uncased's vocabulary size
    config.data.valid_lengths = (1024,)
    config.optim.learning_rate = 1e-5
    config.optim.warmup_steps = 1000
    config.train.steps = 100_000
    config.train.batch_size = 64
    config.train.log_every = 100
    config.train.eval_every = 5000
    config.train.eval_batches = 50
    config.train.checkpoint_every = 5000
    return base.finish(config, arg)
