"""The length-generalization retrieval bench (issue 54, items 2 and 3): small causal models
trained on a retrieval task at one length, scored at 1x, 2x, 4x and 8x it.

    results = length_bench.run_study(config, workdir, raw_dir=None, log=print)   # cached runs
    record, results = length_bench.read_results("docs/results/raw/bench_passkey")  # from raw
    params = length_bench.arm_params(length_bench.arms(config), "iRoPE", 0, workdir)
    length_bench.needle_sweep(length_bench.arms(config)["iRoPE"], params, 256, rows=64)

The task is one of data/retrieval_tasks.py's (passkey, MQAR, flip-flop). Each arm is data in
the config: a trained arm gives ModelConfig fields over the shared ones ({"model": {...}});
a read arm ({"reads": ARM, "scaling": {...}}) scores a trained arm's parameters with a RoPE
scaling applied past the trained length (NTK, YaRN: length_study.scaling_at's factor). A run
(an arm, a seed) trains on fresh rows each step (seeded by (seed, step)), loss on the answer
tokens only, and is scored by exact match of each answer (all its T tokens right, read by
teacher forcing) on fixed evaluation rows (the config's eval_seed: the same rows for every run),
overall and by the answer's depth (retrieval_tasks' module doc).

A run's outputs are <workdir>/<arm>/seed<k>/RESULT (its settings, accuracy by evaluation set,
length and depth, loss curve, seconds, the code's commit) and a trained arm's PARAMS there (for
its read arms); a run whose RESULT exists with the same settings is not run again, so a killed
bench resumes, and one whose settings differ is a ValueError. A run in training saves its state
(SNAPSHOT) after each quarter of its steps, so a run killed midway goes on from the last, to
the parameters it would have reached unstopped. The raw folder holds each RESULT and RECORD
(study_record.make_record's fields), from which the results page is rebuilt; a bench started
again on a fresh machine (an empty workdir) takes its finished runs back from there, and trains
again only an arm whose parameters a read arm still to run needs (seeded, the same model on the
same kind of machine). The config is a plain dictionary (configs/bench_length.py's,
`to_dict()`).
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import optax

from roformer_jax.data import retrieval_tasks
from roformer_jax.nn.model import RoFormer
from roformer_jax.nn.model_config import model_config_from_dict
from roformer_jax.studies import own_runs, stats
from roformer_jax.studies.length_study import scaling_at
from roformer_jax.studies.run_dirs import run_dir
from roformer_jax.training.provenance import code_version

RESULT = own_runs.RESULT
RECORD = "bench.json"  # not study.json (trainer runs) nor record.json (the ViT study's)
PARAMS = "params.msgpack"  # workdir only: read arms score these
SNAPSHOT = "snapshot.msgpack"  # workdir only: a run's training state, while it trains
SNAPSHOT_PARTS = 4  # a run saves its state after each of these parts but the last
NEEDLE_SWEEP = "needle_sweep.json"  # raw folder: experiments/needle_sweep.py's accuracies
EVAL_CHUNK = 32  # rows per forward pass when scoring (memory at 8x the length)
_SHARED = ("task", "options", "train_length", "steps", "batch_size", "learning_rate")
_SHARED += ("warmup_steps", "weight_decay", "eval_sets", "eval_factors", "eval_rows")
_SHARED += ("eval_seed", "depth_edges")


def eval_lengths(config: Mapping) -> list[int]:
    return [config["train_length"] * factor for factor in config["eval_factors"]]


def arms(config: Mapping) -> dict[str, dict]:
    """Each arm's settings: the shared ones, with its model (the shared fields, its own over
    them, the task's vocab) or, for a read arm, the arm it reads and the scaling."""
    shared = json.loads(json.dumps({k: config[k] for k in _SHARED}))
    vocab = retrieval_tasks.TASKS[config["task"]].vocab_size(**config["options"])
    trained = {}
    for name, own in config["arms"].items():
        unknown = set(own) - {"model", "reads", "scaling"}
        if (
            unknown
            or ("reads" in own) == ("model" in own)
            or ("reads" in own) != ("scaling" in own)
        ):
            raise ValueError(
                f"arm {name!r} has keys {sorted(own)}; give 'model', or 'reads' and 'scaling'"
            )
        if "model" in own:
            model = {**json.loads(json.dumps(config["model"])), "vocab_size": vocab}
            _merge(model, {**json.loads(json.dumps(own["model"])), "causal": True})
            model_config_from_dict(model)  # a bad arm fails before any training
            trained[name] = {**shared, "model": model}
    out = {}
    for name, own in config["arms"].items():
        if "reads" in own and own["reads"] not in trained:
            raise ValueError(f"arm {name!r} reads {own['reads']!r}, not a trained arm")
        read = {"reads": own["reads"], "scaling": own["scaling"]} if "reads" in own else {}
        out[name] = {**trained[own.get("reads", name)], **read}
    return out


def _merge(into: dict, over: Mapping) -> None:
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


class Programs(NamedTuple):
    """A model's jitted functions, shared by every seed (and length) that uses it."""

    net: RoFormer
    step: Callable  # (params, opt_state, tokens [B, L], heads [B, P], targets [B, P]) -> ...
    predict: Callable  # (params, tokens [B, L], heads [B, P]) -> int [B, P]
    optimizer: optax.GradientTransformation


@functools.lru_cache(maxsize=4)
def programs(model_json: str, steps: int, learning_rate: float, warmup: int, decay: float):
    """The model's Programs; `heads` are the positions before the answer tokens."""
    net = RoFormer(model_config_from_dict(json.loads(model_json)))
    schedule = optax.warmup_cosine_decay_schedule(0.0, learning_rate, warmup, steps)
    optimizer = optax.chain(
        optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=decay)
    )

    def logits(params, tokens, heads):  # [B, P, V]
        return net.apply(params, tokens, mlm_positions=heads).logits

    @jax.jit
    def step(params, opt_state, tokens, heads, targets):
        def loss_fn(p):
            out = logits(p, tokens, heads)
            return optax.softmax_cross_entropy_with_integer_labels(out, targets).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    predict = jax.jit(lambda params, tokens, heads: jnp.argmax(logits(params, tokens, heads), -1))
    return Programs(net, step, predict, optimizer)


def _programs(settings: Mapping, model: Mapping) -> Programs:
    optim = ("steps", "learning_rate", "warmup_steps", "weight_decay")
    return programs(json.dumps(model, sort_keys=True), *(settings[k] for k in optim))


def _heads(examples: retrieval_tasks.Examples) -> tuple[np.ndarray, np.ndarray]:
    """(heads, targets) int32 [B, Q·T]: where the model predicts each answer token, and it."""
    b = len(examples.tokens)
    return examples.positions.reshape(b, -1) - 1, examples.answers.reshape(b, -1)


def train(settings: Mapping, seed: int, snapshot_dir: str | None = None) -> tuple[dict, list]:
    """(params, loss curve [[step, mean loss]]) of a trained arm from `seed` (its init and its
    rows, drawn from (seed, step)). With snapshot_dir, the training state is saved there after
    each of SNAPSHOT_PARTS parts of the run but the last, and a killed run goes on from its last
    snapshot, to the same parameters as one never stopped (the rows are drawn from the step, the
    state restored exactly)."""
    started = time.time()
    net, step, _, optimizer = _programs(settings, settings["model"])
    draw = functools.partial(
        retrieval_tasks.generate,
        settings["task"],
        length=settings["train_length"],
        batch=settings["batch_size"],
        **settings["options"],
    )
    params = net.init(jax.random.key(seed), draw(seed=(seed, 0, 0)).tokens[:1])
    state = {"step": 0, "params": params, "opt_state": optimizer.init(params), "curve": []}
    state["seconds"] = 0.0  # spent training before this process, in earlier ones
    path = os.path.join(snapshot_dir, SNAPSHOT) if snapshot_dir else None
    if path and os.path.exists(path):
        state = _restore_snapshot(path, state, settings)
    params, opt_state, curve, losses = state["params"], state["opt_state"], state["curve"], []
    every = max(1, settings["steps"] // 20)  # a curve point every `every` steps
    save_every = every * (20 // SNAPSHOT_PARTS)  # at a curve point: no loss awaits its mean
    for t in range(state["step"], settings["steps"]):
        examples = draw(seed=(seed, 0, t))
        params, opt_state, loss = step(params, opt_state, examples.tokens, *_heads(examples))
        losses.append(loss)
        if (t + 1) % every == 0:
            curve.append([t + 1, float(np.mean(jax.device_get(losses)))])
            losses = []
        if path and (t + 1) % save_every == 0 and t + 1 < settings["steps"]:
            seconds = state["seconds"] + time.time() - started
            snapshot = {"step": t + 1, "params": params, "opt_state": opt_state}
            _save_snapshot(path, {**snapshot, "curve": curve, "seconds": seconds}, settings)
    if not np.isfinite(curve[-1][1]):
        raise FloatingPointError(f"the training loss is {curve[-1][1]} at step {curve[-1][0]}")
    return params, curve


def snapshot_seconds(snapshot_dir: str) -> float:
    """Seconds of training that the snapshot in snapshot_dir holds (0 without one)."""
    path = os.path.join(snapshot_dir, SNAPSHOT)
    if not os.path.exists(path):
        return 0.0
    with open(path, "rb") as f:
        return float(flax.serialization.msgpack_restore(f.read())["seconds"])


def _save_snapshot(path: str, state: dict, settings: Mapping) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    curve = np.asarray(state["curve"], np.float64).reshape(-1, 2)
    state = {**state, "curve": curve, "settings": json.dumps(settings, sort_keys=True)}
    with open(path + ".tmp", "wb") as f:  # a kill while writing leaves the last snapshot whole
        f.write(flax.serialization.msgpack_serialize(flax.serialization.to_state_dict(state)))
    os.replace(path + ".tmp", path)


def _restore_snapshot(path: str, fresh: dict, settings: Mapping) -> dict:
    """The saved state, its arrays in `fresh`'s structure (the optimizer's named tuples);
    ValueError where it is a run of other settings."""
    with open(path, "rb") as f:
        saved = flax.serialization.msgpack_restore(f.read())
    if saved["settings"] != json.dumps(settings, sort_keys=True):
        raise ValueError(f"{path} is a snapshot of a run of other settings; delete it")
    arrays = {k: fresh[k] for k in ("params", "opt_state")}
    restored = flax.serialization.from_state_dict(arrays, {k: saved[k] for k in arrays})
    curve = [[int(t), float(loss)] for t, loss in saved["curve"]]
    return {
        **restored,
        "step": int(saved["step"]),
        "curve": curve,
        "seconds": float(saved["seconds"]),
    }


def score(settings: Mapping, params) -> dict:
    """{"accuracy": {set: {length: exact match}}, "by_depth": {set: {length: [accuracy per
    depth bin, None where empty]}}} on the fixed evaluation rows of every set and length."""
    accuracy, by_depth = {}, {}
    for name, own in settings["eval_sets"].items():
        accuracy[name], by_depth[name] = {}, {}
        for length in eval_lengths(settings):
            examples = retrieval_tasks.generate(
                settings["task"],
                seed=settings["eval_seed"],
                length=length,
                batch=settings["eval_rows"],
                **{**settings["options"], **own},
            )
            right = _answers_right(settings, params, examples, length)  # [B, Q]
            accuracy[name][str(length)] = float(np.mean(right))
            bins = stats.binned_accuracy(
                examples.depth.ravel(), right.ravel(), edges=settings["depth_edges"]
            )
            by_depth[name][str(length)] = [b.accuracy for b in bins]
    return {"accuracy": accuracy, "by_depth": by_depth}


def needle_sweep(settings: Mapping, params, length: int, rows: int) -> list[float]:
    """Passkey's exact match with the needle's marker at every token it can sit at, [accuracy
    at marker token k + 1 for k in 0..haystack_size], each over `rows` rows of the set's text
    haystack (eval_seed's). Where a model loses the needle by its place, not its depth: a
    chunk boundary through it (iRoPE), a window's edge."""
    if settings["task"] != "passkey":
        raise ValueError(f"a needle sweep needs the passkey task, not {settings['task']!r}")
    size = retrieval_tasks.haystack_size(length, settings["options"]["digits"])
    examples = retrieval_tasks.generate(
        "passkey",
        seed=settings["eval_seed"],
        length=length,
        batch=rows * (size + 1),
        **{**settings["options"], "haystack": "text"},
        depths=[k / size for k in range(size + 1)],  # row b at depth (b % (size + 1)) / size
    )
    right = _answers_right(settings, params, examples, length).reshape(rows, size + 1)
    return [float(a) for a in right.mean(axis=0)]


def _answers_right(settings, params, examples, length: int) -> np.ndarray:
    """bool [B, Q]: each answer read right, all its tokens, by the model `settings` reads."""
    model = settings["model"]
    scaling = scaling_at(settings.get("scaling"), length, settings["train_length"])
    if scaling is not None:
        model = json.loads(json.dumps(model))
        _merge(model, {"sections": {"rope": {"scaling": scaling}}})
    predict = _programs(settings, model).predict
    heads, targets = _heads(examples)
    guesses = np.concatenate(
        [
            np.asarray(
                predict(params, examples.tokens[i : i + EVAL_CHUNK], heads[i : i + EVAL_CHUNK])
            )
            for i in range(0, len(heads), EVAL_CHUNK)
        ]
    )
    return np.all((guesses == targets).reshape(examples.positions.shape), axis=-1)


def run_study(
    config: Mapping, workdir: str, *, raw_dir: str | None = None, log: Callable = print
) -> dict[str, list[dict]]:
    """Every arm of `config` for every seed, cached (module doc): {arm: [result per seed]}.
    Logs a line as each run starts and ends (with what is left); with raw_dir, each result
    is copied there as it finishes."""
    settings_of, results = arms(config), {}
    todo = [(a, s) for a in settings_of for s in config["seeds"]]
    started, ran = time.time(), 0  # runs this command trained or read, for the time left
    for done, (name, seed) in enumerate(todo):
        settings, directory = settings_of[name], run_dir(workdir, name, seed)
        result = own_runs.cached_result(directory, settings)
        if result is None and raw_dir:  # finished on another machine or in another sitting
            result = own_runs.cached_result(run_dir(raw_dir, name, seed), settings)
        if result is None:
            log(f"[{done + 1}/{len(todo)}] {name} seed {seed}: running")
            scores, params = _run(settings_of, name, seed, workdir)
            result = {"settings": settings, "seed": seed, **scores, "code": code_version()}
            result["xla_flags"] = os.environ.get("XLA_FLAGS", "")  # last bits of float32
            own_runs.write_json(os.path.join(directory, RESULT), result)
            if "reads" not in settings:
                _write_params(directory, params)
            ran += 1
            left = (time.time() - started) / ran * (len(todo) - done - 1)
            log(f"{name} seed {seed}: {_summary(result)}; about {left / 60:.0f} min left")
        if raw_dir:
            own_runs.write_json(os.path.join(run_dir(raw_dir, name, seed), RESULT), result)
        results.setdefault(name, []).append(result)
    return results


def _run(settings_of: Mapping, name: str, seed: int, workdir: str) -> tuple[dict, dict]:
    """(a run's scores, loss curve and seconds, those before a restart included; its
    parameters)."""
    started, settings, directory = time.time(), settings_of[name], run_dir(workdir, name, seed)
    earlier = snapshot_seconds(directory)
    if "reads" in settings:
        params, curve = _trained_params(settings_of, settings["reads"], seed, workdir), []
    else:
        params, curve = train(settings, seed, snapshot_dir=directory)
    run_s = earlier + time.time() - started
    return {**score(settings, params), "loss": curve, "run_s": run_s}, params


def arm_params(settings_of: Mapping, name: str, seed: int, workdir: str):
    """The parameters arm `name` scores at `seed`: its own, or those of the arm it reads."""
    return _trained_params(settings_of, settings_of[name].get("reads", name), seed, workdir)


def _trained_params(settings_of: Mapping, name: str, seed: int, workdir: str):
    """A trained arm's parameters as it saved them; trained again where its run was taken back
    from the raw folder, which keeps no parameters."""
    directory = run_dir(workdir, name, seed)
    if not os.path.exists(os.path.join(directory, PARAMS)):
        _write_params(directory, train(settings_of[name], seed, snapshot_dir=directory)[0])
    with open(os.path.join(directory, PARAMS), "rb") as f:
        return flax.serialization.msgpack_restore(f.read())


def _write_params(directory: str, params) -> None:
    """A trained arm's PARAMS, whose snapshot it no longer needs."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, PARAMS), "wb") as f:
        f.write(flax.serialization.to_bytes(params))
    if os.path.exists(os.path.join(directory, SNAPSHOT)):
        os.remove(os.path.join(directory, SNAPSHOT))


def _summary(result: Mapping) -> str:
    return "; ".join(
        f"{name} " + ", ".join(f"{n}: {a:.2f}" for n, a in by_length.items())
        for name, by_length in result["accuracy"].items()
    )


def write_record(raw_dir: str, record: Mapping) -> None:
    own_runs.write_json(os.path.join(raw_dir, RECORD), record)


def read_results(raw_dir: str) -> tuple[dict, dict[str, list[dict]]]:
    """(record, {arm: [result per seed]}) from a raw folder alone."""
    return own_runs.read_results(raw_dir, RECORD, "arms")
