"""The ViT resolution study (issue 32, item 4): trained at one resolution, scored at larger ones.

    results = vit_study.run_study(config, workdir, raw_dir=None, log=print)   # cached runs
    results = vit_study.read_results("docs/results/raw/vit")                  # the same, raw
    print(vit_study.accuracy_table(results), vit_study.paired_table(results))

Heo et al. 2024 claim that RoPE-Axial and RoPE-Mixed hold a ViT's accuracy better than an
interpolated absolute table when the resolution grows past the training one. Here each run
(an encoding, a seed) trains `roformer_jax.nn.vit.ViT` on scikit-learn's digits upsampled to
`train_size` pixels and scores the same held-out digits upsampled to each of `eval_sizes`:
the content stays the same, only the grid of patches grows.

Issue 56: `valid_size` digits cut from the training ones (the test digits stay as they were)
are scored as "valid_accuracy"; a selection study (`select`) scores them alone, so that
`chosen_rates` chooses without the test digits, which are then scored once.

A run's outputs are <workdir>/<run>/seed<k>/RESULT (its settings, accuracy per size, loss
curve, seconds, the code's commit); a run whose file exists with the same settings is not
trained again, so a killed study resumes, and one whose settings differ is a ValueError. The
raw folder holds those files and RECORD (study_record.make_record's fields), from which the
results page is rebuilt. The config is a plain dictionary (configs/study_vit.py's,
`to_dict()`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from roformer_jax.nn.model_config import model_config_from_dict
from roformer_jax.nn.vit import ViT
from roformer_jax.studies import own_runs, plots, stats, tables
from roformer_jax.studies.run_dirs import run_dir
from roformer_jax.training.provenance import code_version

RESULT = own_runs.RESULT
RECORD = "record.json"  # not study.json: study_record.read_raw reads trainer runs
CLASSES = 10  # digits 0-9


@dataclasses.dataclass(frozen=True)
class Digits:
    """scikit-learn's 8 × 8 digits split once: images float32 [B, 8, 8, 1] in [0, 1], int labels."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    valid_images: np.ndarray  # cut from the training digits; [0, 8, 8, 1] at valid_size 0
    valid_labels: np.ndarray


def load_digits(test_size: int, split_seed: int, valid_size: int = 0) -> Digits:
    """The 1,797 digits (shipped inside scikit-learn, nothing downloaded), a fixed random split
    with `test_size` held out and the next `valid_size` of the permutation for validation: the
    test digits do not depend on valid_size."""
    # Imported here, not at the top: results_page imports this module, and rebuilding the page
    # from raw files needs no scikit-learn (the "vision" extra, not a dependency).
    from sklearn import datasets

    digits = datasets.load_digits()
    images = (digits.images / 16.0).astype(np.float32)[..., None]  # [B, 8, 8, 1]
    order = np.random.default_rng(split_seed).permutation(len(images))
    test, valid = order[:test_size], order[test_size : test_size + valid_size]
    train = order[test_size + valid_size :]
    labels = digits.target
    return Digits(
        images[train], labels[train], images[test], labels[test], images[valid], labels[valid]
    )


def upsample(images: np.ndarray, size: int) -> np.ndarray:
    """images [B, Y, X, C] bilinearly resized to [B, size, size, C] (half-pixel centres)."""
    b, _, _, c = images.shape
    return np.asarray(jax.image.resize(images, (b, size, size, c), method="linear"))


def zoomed_crops(images, rng, size: int, max_zoom: float) -> jax.Array:
    """Random zoomed crops, the scale part of ViT/DeiT's RandomResizedCrop: each image of
    [B, Y, Y, C] zoomed by z ~ U[1, max_zoom] into a window of side Y / z at a random place,
    resized bilinearly to [B, size, size, C]. At z = 1 it is `upsample`'s whole image."""
    b, y, _, c = images.shape
    zoom_key, place_key = jax.random.split(rng)
    zoom = jax.random.uniform(zoom_key, (b,), minval=1.0, maxval=max_zoom)  # [B]
    corner = jax.random.uniform(place_key, (b, 2)) * (y - y / zoom)[:, None]  # [B, 2] source px
    scale = size * zoom / y  # [B] output pixels per source pixel

    def crop(image, s, o):  # output pixel x reads source (x - translation) / scale
        return jax.image.scale_and_translate(
            image, (size, size, c), (0, 1), jnp.stack([s, s]), -o * s, method="linear"
        )

    return jax.vmap(crop)(images, scale, corner)


def runs(config: Mapping) -> dict[str, dict]:
    """Each run's settings: the shared ones with its own `runs` entry over them (model fields,
    "table", "learning_rate"); valid_size and select only where set, as earlier runs wrote."""
    shared = {
        k: config[k]
        for k in (
            "model",
            "patch",
            "train_size",
            "eval_sizes",
            "steps",
            "batch_size",
            "learning_rate",
            "warmup_steps",
            "weight_decay",
            "test_size",
            "split_seed",
            "max_zoom",
        )
    }
    shared |= {k: config[k] for k in ("valid_size", "select") if config.get(k)}
    out = {}
    for name, own in config["runs"].items():
        settings = json.loads(json.dumps(shared))
        settings["model"].update(own.get("model", {}))
        settings["table"] = bool(own.get("table", False))
        if "learning_rate" in own:
            settings["learning_rate"] = own["learning_rate"]
        out[name] = settings
    return out


def model(settings: Mapping) -> ViT:
    grid = settings["train_size"] // settings["patch"]
    return ViT(
        model_config_from_dict(settings["model"]),
        settings["patch"],
        CLASSES,
        table_grid=(grid, grid) if settings["table"] else None,
    )


class Programs(NamedTuple):
    """What every seed of a run shares: the model, optimizer, and their jitted functions, so
    that the seeds of a run compile them once."""

    net: ViT
    optimizer: optax.GradientTransformation
    # (params, opt_state, images, labels, rng) -> (params, opt_state, loss); images are the
    # sources [B, 8, 8, 1] where the run zooms (max_zoom > 1), else upsampled to train_size.
    step: Callable
    predict: Callable  # (params, images [B, Y, X, 1]) -> int [B]


@functools.lru_cache(maxsize=1)
def programs(settings_json: str) -> Programs:
    """A run's Programs, from its settings as JSON (hashable, so cached for the next seed)."""
    settings = json.loads(settings_json)
    net = model(settings)
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, settings["learning_rate"], settings["warmup_steps"], settings["steps"]
    )
    optimizer = optax.adamw(schedule, weight_decay=settings["weight_decay"])

    zoom = settings["max_zoom"] > 1.0

    @jax.jit
    def step(params, opt_state, images, labels, rng):
        if zoom:  # images are the 8 x 8 sources, cropped here; else already upsampled
            crops = jax.random.fold_in(rng, 1)
            images = zoomed_crops(images, crops, settings["train_size"], settings["max_zoom"])

        def loss_fn(p):
            logits = net.apply(p, images, deterministic=False, rngs={"dropout": rng})
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    predict = jax.jit(lambda params, images: jnp.argmax(net.apply(params, images), axis=-1))
    return Programs(net, optimizer, step, predict)


def train_and_score(settings: Mapping, seed: int, data: Digits) -> dict:
    """Trains one run from `seed` (its init, dropout and batch order) and scores it at every
    size: {"accuracy": {size: fraction right} on the test digits (not in a selection run),
    "valid_accuracy": the same on the validation digits (where there are some), "loss":
    [[step, mean train loss]], "train_s"}."""
    started = time.time()
    net, optimizer, step, predict = programs(json.dumps(settings, sort_keys=True))
    train_x = upsample(data.train_images, settings["train_size"])
    key = jax.random.key(seed)
    params = net.init(key, train_x[:1])
    if settings["max_zoom"] > 1.0:
        train_x = data.train_images  # the step crops them
    opt_state = optimizer.init(params)
    order, losses, curve = np.random.default_rng(seed), [], []
    batch, every = settings["batch_size"], max(1, settings["steps"] // 20)
    indices = np.zeros(0, int)
    for t in range(settings["steps"]):
        if len(indices) < batch:  # epochs, each a fresh permutation
            indices = np.concatenate([indices, order.permutation(len(train_x))])
        chosen, indices = indices[:batch], indices[batch:]
        params, opt_state, loss = step(
            params,
            opt_state,
            train_x[chosen],
            data.train_labels[chosen],
            jax.random.fold_in(key, t),
        )
        losses.append(loss)
        if (t + 1) % every == 0:
            curve.append([t + 1, float(np.mean(jax.device_get(losses)))])
            losses = []

    def scored(images, labels):
        return {
            str(size): float(np.mean(np.asarray(predict(params, upsample(images, size))) == labels))
            for size in settings["eval_sizes"]
        }

    result = {}
    if not settings.get("select"):
        result["accuracy"] = scored(data.test_images, data.test_labels)
    if settings.get("valid_size"):
        result["valid_accuracy"] = scored(data.valid_images, data.valid_labels)
    return result | {"loss": curve, "train_s": time.time() - started}


def run_study(
    config: Mapping, workdir: str, *, raw_dir: str | None = None, log: Callable = print
) -> dict[str, list[dict]]:
    """Every run of `config` for every seed, cached (module doc): {run: [result per seed]}.
    With raw_dir, each result is copied there as it finishes."""
    data = load_digits(config["test_size"], config["split_seed"], config.get("valid_size", 0))
    results = {}
    for name, settings in runs(config).items():
        results[name] = []
        for seed in config["seeds"]:
            directory = run_dir(workdir, name, seed)
            result = own_runs.cached_result(directory, settings)
            if result is None:
                log(f"training {name} seed {seed}")
                result = {
                    "settings": settings,
                    "seed": seed,
                    **train_and_score(settings, seed, data),
                    "code": code_version(),
                }
                own_runs.write_json(os.path.join(directory, RESULT), result)
            log(f"{name} seed {seed}: {result.get('accuracy', result.get('valid_accuracy'))}")
            if raw_dir:
                target = run_dir(raw_dir, name, seed)
                os.makedirs(target, exist_ok=True)
                shutil.copyfile(os.path.join(directory, RESULT), os.path.join(target, RESULT))
            results[name].append(result)
    return results


def write_record(raw_dir: str, record: Mapping) -> None:
    own_runs.write_json(os.path.join(raw_dir, RECORD), record)


def read_results(raw_dir: str) -> tuple[dict, dict[str, list[dict]]]:
    """(record, {run: [result per seed]}) from a raw folder alone."""
    return own_runs.read_results(raw_dir, RECORD, "runs")


def chosen_rates(config: Mapping, results: Mapping) -> dict[str, float]:
    """{encoding: its learning rate of highest mean validation accuracy at the training size}
    over a selection study's runs, named "<encoding>, lr <rate>" (configs/study_vit.py's
    `:select`). Reads "valid_accuracy" alone; a study that scored the test digits is a
    ValueError, so that no choice can rest on them."""
    if not config.get("select"):
        raise ValueError(
            f"{config['title']!r} scored its test digits: a setting is chosen on a selection "
            "study (select: True), which scores the validation digits alone"
        )
    size, best = str(config["train_size"]), {}
    for name, seeds in results.items():
        encoding = name.rpartition(", lr ")[0]
        score = float(np.mean([r["valid_accuracy"][size] for r in seeds]))
        rate = runs(config)[name]["learning_rate"]
        if encoding not in best or score > best[encoding][0]:
            best[encoding] = (score, rate)
    return {encoding: rate for encoding, (_, rate) in best.items()}


# ---------------------------------------------------------------- tables, figure


def _accuracies(results: Mapping, name: str, size: int) -> list[float]:
    return [r["accuracy"][str(size)] for r in results[name]]


def _sizes(config: Mapping) -> list[int]:
    return list(config["eval_sizes"])


def accuracy_table(config: Mapping, results: Mapping) -> str:
    """Markdown: one row per encoding, one column per image size; test accuracy as mean ±
    sample std over seeds."""
    sizes = _sizes(config)
    header = [f"{s} px" + (" (trained)" if s == config["train_size"] else "") for s in sizes]
    lines = [
        "| encoding | " + " | ".join(header) + " | seeds |",
        "|---|" + "---|" * len(sizes) + "---|",
    ]
    for name in results:
        cells = [tables.mean_std_text(_accuracies(results, name, s)) for s in sizes]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {len(results[name])} |")
    return "\n".join(lines)


def paired_differences(config: Mapping, results: Mapping, pair: str, size: int) -> list[float]:
    """Accuracy of the pair's first run minus its second, seed by seed, at `size`."""
    a, b = config["pairs"][pair]
    return [x - y for x, y in zip(_accuracies(results, a, size), _accuracies(results, b, size))]


def paired_table(config: Mapping, results: Mapping) -> str:
    """Markdown: one row per pair of `config["pairs"]`, one column per size; the mean accuracy
    difference over seeds paired by seed, with its 95% t-interval."""
    sizes = _sizes(config)
    lines = [
        "| accuracy difference: mean [95% t-interval] | "
        + " | ".join(f"{s} px" for s in sizes)
        + " |",
        "|---|" + "---|" * len(sizes),
    ]
    for pair in config["pairs"]:
        cells = [tables.interval_text(paired_differences(config, results, pair, s)) for s in sizes]
        lines.append(f"| {pair} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdict(config: Mapping, results: Mapping, pair: str) -> str:
    """Where the pair's 95% interval lies: the sizes where it is above zero, below zero, and
    where it holds zero, e.g. "above zero at 24, 28 px; holds zero at 16, 20, 32 px"."""
    where = {side: [] for side in tables.ZERO_SIDES.values()}
    for size in _sizes(config):
        _, low, high = stats.t_interval(paired_differences(config, results, pair, size))
        where[tables.ZERO_SIDES[tables.interval_side(low, high)]].append(str(size))
    return "; ".join(f"{side} at {', '.join(s)} px" for side, s in where.items() if s)


def figure(config: Mapping, results: Mapping, path: str, *, footnote: str = "") -> str:
    """Test accuracy against image size, one line per encoding, 95% t-intervals over seeds."""
    lines = {name: {s: _accuracies(results, name, s) for s in _sizes(config)} for name in results}
    return plots.plot_accuracy_lengths(
        lines,
        path,
        title=config["title"],
        chance=1.0 / CLASSES,
        footnote=footnote,
        xlabel=f"image size (pixels; trained at {config['train_size']})",
    )


def report(config: Mapping, results: Mapping, png: str, machine: Mapping) -> str:
    """What the study's command prints: a selection study's chosen rates (it scored no test
    digit, so it has no test table or figure), else the accuracy and paired tables, with the
    figure drawn into `png` (its footnote names `machine`)."""
    if config.get("select"):
        return str(chosen_rates(config, results))
    figure(config, results, png, footnote=footnote(config, machine))
    return f"{accuracy_table(config, results)}\n\n{paired_table(config, results)}\n\nwrote {png}"


def footnote(config: Mapping, machine: Mapping) -> str:
    model_cfg = config["model"]
    return (
        f"scikit-learn digits 8x8 upsampled bilinearly; {config['test_size']} test digits; "
        f"ViT {model_cfg['num_layers']} layers x {model_cfg['hidden_size']} dims, "
        f"{model_cfg['num_heads']} heads, {config['patch']}x{config['patch']} patches, mean "
        f"pool; {config['steps']} steps of {config['batch_size']}"
        + (f", random zoom 1-{config['max_zoom']}x" if config.get("max_zoom", 1.0) > 1 else "")
        + f"; {machine.get('cpus')} "
        f"{machine.get('architecture')} cores, JAX {machine.get('jax')}."
    )
