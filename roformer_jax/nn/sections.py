"""The model config's sections: each table entry's hyperparameters as one frozen record.

A position encoding (`positions.ENCODINGS`) or attention kind (`attention_kinds.ATTENTION_KINDS`)
with hyperparameters names a `Section` subclass in its record; `ModelConfig.sections` holds one
of each, under the entry's name, and the entry's hooks receive their own. A section checks its
own fields when made (`__post_init__`); what depends on the rest of the model (the head dim,
the number of layers) is the record's `check`.

Sections are frozen and hashable, dictionaries included (`freeze`), so that a config is a
static argument of `jax.jit` and a Flax module attribute as it is, with no JSON strings.
"""

import dataclasses
import difflib
import json
import operator
import typing
from collections.abc import Mapping
from typing import Any


class FrozenDict(dict):
    """A dict that cannot change and hashes by its items, whatever their order.

    A dict subclass, so that JSON, `dataclasses.asdict` and code that reads HF dictionaries
    take it as they are. Build it with `freeze`, which also freezes what it holds.
    """

    def __hash__(self):
        return hash(frozenset(self.items()))

    def _frozen(self, *args, **kwargs):
        raise TypeError("a FrozenDict cannot change; build a new one with freeze({...})")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _frozen
    __ior__ = _frozen

    def __reduce__(self):
        return FrozenDict, (dict(self),)


def freeze(value: Any) -> Any:
    """`value` with every dict a FrozenDict and every list a tuple, recursively."""
    if isinstance(value, Mapping):
        return FrozenDict({key: freeze(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(item) for item in value)
    return value


@dataclasses.dataclass(frozen=True)
class Section:
    """Base of every section: construction from what a config file or JSON holds.

    A subclass's fields of dict or tuple type are frozen (`freeze`) and may be given as JSON
    text, as a command line gives them; its own checks go in `__post_init__` after super's.
    """

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        for field in dataclasses.fields(self):
            value = _parsed(hints[field.name], getattr(self, field.name), field.name)
            object.__setattr__(self, field.name, value)

    @classmethod
    def make(cls, value: "Section | Mapping | None", where: str) -> "Section":
        """`value` as this section: an instance as it is, a mapping of some of its fields
        (the rest at their defaults), or None (every field at its default). `where` names
        the section in errors, e.g. "sections.linear"."""
        if isinstance(value, cls):
            return value
        if value is None:
            return cls()
        if not isinstance(value, Mapping):
            raise ValueError(f"{where} = {value!r} is not a mapping of {cls.__name__}'s fields")
        check_keys(cls, value, where)
        try:
            return cls(**value)
        except ValueError as error:  # which section, for a config of many
            raise ValueError(f"{where}: {error}") from None

    def check_model(self, config) -> None:
        """Raises ValueError for a model (`config`, a ModelConfig) this section cannot serve;
        called for the chosen entries' sections. Its own fields are checked when made."""
        del config

    def changed(self) -> dict[str, Any]:
        """{field: value} of the fields away from their defaults."""
        default = type(self)()
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(default, f.name)
        }


def as_int(value) -> int | None:
    """value as an int if it is an integer (an int, a NumPy integer or a concrete JAX integer
    scalar), else None: a float, a bool (True is no count) or a traced value."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def check_count(name: str, value, alternative: str = "") -> None:
    """Raises ValueError unless `value` is a positive integer (`as_int`): a size of 100.7 or
    "64" would fail deep inside Flax or XLA instead, a window of 2.5 at the first call."""
    count = as_int(value)
    if count is None or count < 1:
        raise ValueError(f"{name}={value!r} must be a positive integer{alternative}")


def check_keys(cls, keys, where: str) -> None:
    """Raises ValueError for the first of `keys` that is no field of dataclass `cls`, naming
    it as `where`.key with the nearest field (a misspelt config key)."""
    fields = [f.name for f in dataclasses.fields(cls)]
    for key in keys:
        if key not in fields:
            near = difflib.get_close_matches(key, fields, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; fields are {sorted(fields)}"
            raise ValueError(f"unknown key {where}.{key}{hint}")


def _parsed(hint, value, name: str):
    """A field's value, frozen; JSON text is read for a field of dict or tuple type."""
    kinds = typing.get_args(hint) or (hint,)
    structured = any(k in (tuple, FrozenDict) or typing.get_origin(k) is tuple for k in kinds)
    if structured and isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(f"{name}={value!r} is not JSON: {error}") from None
    return freeze(value)
