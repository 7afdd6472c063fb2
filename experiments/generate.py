r"""Generates text from trained causal runs: greedy and sampled continuations of prompts.

  python experiments/generate.py --workdir=runs/causal_wikitext2/softmax_+_RoPE/seed0
  python experiments/generate.py --study=runs/causal_wikitext2 --seed=0 --output=samples.md
  python experiments/generate.py --workdir=... --prompt="The battle of" --max_new_tokens=64

Without --prompt, the prompts are --num_prompts windows of --prompt_tokens tokens cut from the
run's held-out text at evenly spaced offsets: the same for every run of a corpus, text none of
them trained on. Each prompt gets a greedy continuation and a sampled one (--temperature,
--top_k, --rng_seed), stopping at [SEP]. Prints markdown; --output also writes it to a file.
"""

import glob
import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from roformer_jax.nn import decoding  # noqa: E402
from roformer_jax.training import runtime  # noqa: E402
from roformer_jax.training.runs import load_run  # noqa: E402

_WORKDIR = flags.DEFINE_multi_string("workdir", [], "A run's workdir (repeatable).")
_STUDY = flags.DEFINE_string("study", None, "A study's workdir: every run of it at --seed.")
_SEED = flags.DEFINE_integer("seed", 0, "With --study: which seed's run of each.")
_PROMPT = flags.DEFINE_multi_string("prompt", [], "Prompt text (repeatable).")
_NUM_PROMPTS = flags.DEFINE_integer(
    "num_prompts", 2, "Held-out prompts, without --prompt.", lower_bound=1
)
_PROMPT_TOKENS = flags.DEFINE_integer(
    "prompt_tokens", 24, "Tokens of each held-out prompt.", lower_bound=1
)
_NEW = flags.DEFINE_integer("max_new_tokens", 40, "Tokens to generate per prompt.", lower_bound=1)
_TEMPERATURE = flags.DEFINE_float("temperature", 0.8, "Of the sampled continuation.")
_TOP_K = flags.DEFINE_integer("top_k", 40, "Of the sampled continuation.")
_RNG_SEED = flags.DEFINE_integer("rng_seed", 0, "Of the sampled continuation.")
_PREFILL_CHUNK = flags.DEFINE_integer(
    "prefill_chunk",
    None,
    "Prompt tokens per forward pass (decoding.generate's prefill_chunk), for prompts whose "
    "scores [B, N, P, P] would not fit; default: the whole prompt in one pass.",
    lower_bound=1,
)
_OUTPUT = flags.DEFINE_string("output", None, "Also write the markdown here.")


def held_out_prompts(run, count: int, length: int) -> list[list[int]]:
    """`count` windows of `length` token ids from the run's held-out stream, evenly spaced,
    each after a [CLS] as every training row starts."""
    stream = np.asarray(run.corpus.valid_tokens)
    if length >= stream.size:
        raise app.UsageError(
            f"--prompt_tokens={length}: the held-out text has {stream.size} tokens"
        )
    starts = np.linspace(0, stream.size - length - 1, count).astype(int)
    return [[run.tokenizer.cls_id, *map(int, stream[s : s + length])] for s in starts]


def continuations(run, prompts: list[list[int]]) -> list[tuple[str, str, str]]:
    """(prompt, greedy, sampled) text for each prompt."""
    tok = run.tokenizer
    width = max(len(p) for p in prompts)
    ids = np.full((len(prompts), width), tok.pad_id, np.int32)
    mask = np.zeros_like(ids, bool)
    for row, prompt in enumerate(prompts):  # left-padded: [CLS] starts every training row
        ids[row, width - len(prompt) :], mask[row, width - len(prompt) :] = prompt, True
    variables = {"params": run.params}
    common = dict(
        attention_mask=mask,
        max_new_tokens=_NEW.value,
        eos_id=tok.sep_id,
        steps_done=run.step,
        prefill_chunk=_PREFILL_CHUNK.value,
    )
    greedy = decoding.generate(run.model, variables, ids, **common)
    sampled = decoding.generate(
        run.model,
        variables,
        ids,
        temperature=_TEMPERATURE.value,
        top_k=_TOP_K.value,
        rng=jax.random.key(_RNG_SEED.value),
        **common,
    )

    def text(tokens, stop=False):  # a continuation stops at its first [SEP] (then repeated)
        tokens = [int(t) for t in tokens if t not in (tok.pad_id, tok.cls_id)]
        if stop and tok.sep_id in tokens:
            tokens = tokens[: tokens.index(tok.sep_id) + 1]
        return tok.decode(tokens)

    return [
        (
            text(p),
            text(np.asarray(greedy)[i, width:], stop=True),
            text(np.asarray(sampled)[i, width:], stop=True),
        )
        for i, p in enumerate(prompts)
    ]


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    workdirs = list(_WORKDIR.value)
    if _STUDY.value:
        found = sorted(glob.glob(os.path.join(_STUDY.value, "*", f"seed{_SEED.value}")))
        if not found:
            raise app.UsageError(f"--study={_STUDY.value} has no run at --seed={_SEED.value}")
        workdirs += found
    if not workdirs:
        raise app.UsageError("give --workdir or --study")
    lines = [
        f"Greedy, and sampled at temperature {_TEMPERATURE.value} with top-k {_TOP_K.value} "
        f"(rng seed {_RNG_SEED.value}); {_NEW.value} new tokens at most, stopping at [SEP].",
        "",
    ]
    prompts = None
    for workdir in workdirs:
        run = load_run(workdir)
        if _PROMPT.value:
            prompts = [[run.tokenizer.cls_id, *run.tokenizer.encode(p)] for p in _PROMPT.value]
        elif prompts is None:  # the same prompts for every run (they share the corpus)
            prompts = held_out_prompts(run, _NUM_PROMPTS.value, _PROMPT_TOKENS.value)
        lines.append(f"**{os.path.relpath(workdir, _STUDY.value or '.')}** (step {run.step})")
        lines.append("")
        for prompt, greedy, sampled in continuations(run, prompts):
            lines += [f"- prompt: *{prompt}*", f"  - greedy: {greedy}", f"  - sampled: {sampled}"]
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if _OUTPUT.value:
        with open(_OUTPUT.value, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    runtime.run_main(main)
