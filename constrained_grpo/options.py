"""Config dataclasses built from plain dicts: presets, command lines, saved ``config.json``.

Every config of the project (``MultiplierConfig``, ``GRPOConfig``, the text agent's
``LMConfig``, ``TinyLMConfig``, the baselines' ``PPOConfig``) is a frozen dataclass that
takes its options by name. Three functions serve them all:

* :func:`check_options`: a misspelled option is an error that names it and the valid
  options, never silently ignored;
* :func:`coerce_fields`: JSON values in the declared field types (a list for a
  ``tuple[...]`` field becomes a tuple, a mapping is copied into a dict, a nested config
  given as a dict becomes that config), called from ``__post_init__``;
* :func:`with_options`: a copy with overrides applied, where a nested config given as a
  dict is merged key by key into the current one;

and :func:`merge_options` stacks option layers (an algorithm's row, its task family's,
the user's) the same way for every algorithm before any config is built.

Both check every value against its field's annotation (:func:`check_types`): a string
for a number, ``true`` for a learning rate or a NaN is an :class:`OptionError` that
names the field, never a traceback from deep inside training.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import json
import math
import numbers
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from dataclasses import MISSING, Field, dataclass, fields, is_dataclass, replace
from typing import Any, TypeVar

__all__ = ["CheckpointError", "OptionError", "check_options", "read_saved_json", "reading_checkpoint", "check_types", "coerce_fields", "merge_options", "option_names", "with_options"]

ConfigT = TypeVar("ConfigT")


#: The nested config that option layers merge field by field (``MultiplierConfig``'s options).
NESTED_KEY = "multiplier"


def merge_options(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Merge option layers left to right, a later layer winning key by key, except that the
    ``multiplier`` options (a dict, or a ``MultiplierConfig``) merge field by field, so
    ``{"multiplier": {"kp": 0.3}}`` over a PID row keeps its rule and other gains. The one
    merge every algorithm's configuration goes through (registry defaults, variant rows,
    task-family rows, presets, the user's options).

    >>> merge_options({"lr": 1e-3, "multiplier": {"rule": "pid"}}, {"multiplier": {"kp": 0.5}})
    {'lr': 0.001, 'multiplier': {'rule': 'pid', 'kp': 0.5}}
    """
    merged: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if key != NESTED_KEY:
                merged[key] = value
                continue
            if is_dataclass(value) and not isinstance(value, type):
                value = {f.name: getattr(value, f.name) for f in fields(value)}
            if not isinstance(value, Mapping):
                raise TypeError(f"multiplier={value!r} must be a dict of MultiplierConfig options, e.g. {{'rule': 'pid'}}")
            merged[key] = {**merged.get(key, {}), **value}
    return merged


class OptionError(ValueError, TypeError):
    """An option's value has the wrong type; the message names the option and the type it takes.

    Both a ``ValueError`` (a bad value from a user) and a ``TypeError`` (what the
    dataclass itself would have raised), so callers catching either keep working.
    """


def _type_name(hint: Any) -> str:
    names = {float: "a number", int: "an integer", bool: "true or false", str: "a string", type(None): "null"}
    if hint in names:
        return names[hint]
    origin = typing.get_origin(hint)
    if origin is tuple:
        args = typing.get_args(hint)
        return f"a list of {_type_name(args[0]) if args else 'values'}"
    if origin in (Mapping, dict) or hint in (Mapping, dict):
        return "a mapping"
    if isinstance(hint, type) and is_dataclass(hint):
        return f"a mapping of {hint.__name__} options"
    return str(hint)


def _fits(value: Any, hint: Any) -> bool | None:
    """Whether ``value`` has type ``hint``; None where the hint is not one this module checks."""
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool) or type(value).__name__ == "bool_"
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool) and type(value).__name__ != "bool_"
    if hint is float:
        return (
            isinstance(value, numbers.Real)
            and not isinstance(value, bool)
            and type(value).__name__ != "bool_"
            and math.isfinite(float(value))
        )
    if hint is str:
        return isinstance(value, str)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        results = [_fits(value, arm) for arm in typing.get_args(hint)]
        return True if any(results) else (None if None in results else False)
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_fits(v, args[0]) is not False for v in value)
        return None
    if origin in (Mapping, dict) or hint in (Mapping, dict):
        if not isinstance(value, Mapping):
            return False
        args = typing.get_args(hint)
        if len(args) == 2:
            return all(_fits(k, args[0]) is not False and _fits(v, args[1]) is not False for k, v in value.items())
        return True
    if isinstance(hint, type) and is_dataclass(hint):
        return isinstance(value, hint)
    return None


def check_types(config: Any) -> None:
    """Raise :class:`OptionError` when a field of dataclass ``config`` does not hold its declared type.

    Checked: ``float`` (a finite real number, not a boolean), ``int`` (an integer, not a
    boolean), ``bool``, ``str``, ``None``, ``tuple[T, ...]``, ``Mapping[K, V]``, nested
    configs and unions of these; other annotations are left to the config's own checks.
    """
    hints = _hints(type(config))
    for f in fields(config):
        value = getattr(config, f.name)
        if _fits(value, hints[f.name]) is False:
            raise OptionError(
                f"{type(config).__name__} option {f.name!r} takes {_type_name_union(hints[f.name])}, got {value!r}"
                + (" (not finite)" if isinstance(value, float) and not math.isfinite(value) else "")
            )


def _type_name_union(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(hint))
    return _type_name(hint)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def option_names(cls: type) -> list[str]:
    """The field names of dataclass ``cls``, sorted: the options it takes."""
    return sorted(f.name for f in fields(cls))


def check_options(
    given: Iterable[str], valid: Iterable[str], kind: str = "", *, hint: str = "", error: type[Exception] = ValueError
) -> None:
    """Raise ``error`` when ``given`` holds a name outside ``valid``.

    The message names the unknown options and lists the valid ones; ``kind`` says whose
    options they are and ``hint`` is appended (say, where a misplaced option belongs).

    >>> check_options({"lr": 0.1, "lrr": 0.2}, ["lr", "init"], "multiplier")
    Traceback (most recent call last):
    ...
    ValueError: unknown multiplier option(s) ['lrr'] (did you mean 'lr'?); valid options: ['init', 'lr']
    """
    valid = sorted(valid)
    unknown = sorted(set(given) - set(valid))
    if unknown:
        what = f"{kind} option(s)" if kind else "option(s)"
        raise error(f"unknown {what} {unknown}{did_you_mean(unknown, valid)}; valid options: {valid}{hint}")


def did_you_mean(names: Iterable[str], valid: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest valid name to each of ``names`` (difflib), or ''.

    >>> did_you_mean(["entropy_coeff"], ["entropy_coef", "lr"])
    " (did you mean 'entropy_coef'?)"
    >>> did_you_mean(["PPO_Lag"], ["ppo-lag", "ppo"])
    " (did you mean 'ppo-lag'?)"
    """
    valid = list(valid)
    # Compared without case and separators: PPO_Lag finds ppo-lag.
    folded: dict[str, str] = {}
    for v in valid:
        folded.setdefault(_fold(v), v)
    close = [folded[m[0]] for n in names if (m := difflib.get_close_matches(_fold(str(n)), list(folded), n=1, cutoff=0.6))]
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""


def _fold(name: str) -> str:
    return name.lower().replace("_", "-").replace(" ", "-")


@dataclass(frozen=True)
class _FieldKind:
    takes_tuple: bool
    takes_mapping: bool
    takes_int: bool
    takes_float: bool
    default_config: Callable[[], Any] | None
    """For a field that holds a nested config: makes the field's default."""


def _default_maker(f: Field[Any], config_cls: type) -> Callable[[], Any]:
    if f.default_factory is not MISSING:
        return f.default_factory
    if f.default is not MISSING:
        return lambda: f.default
    return config_cls


@functools.cache
def _field_kinds(cls: type) -> dict[str, _FieldKind]:
    """What each field's annotation accepts (evaluated once per class)."""
    hints = typing.get_type_hints(cls)
    kinds = {}
    for f in fields(cls):
        hint = hints[f.name]
        arms = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
        origins = [typing.get_origin(a) or a for a in arms]
        config_cls = next((a for a in arms if isinstance(a, type) and is_dataclass(a)), None)
        kinds[f.name] = _FieldKind(
            takes_tuple=tuple in origins,
            takes_mapping=any(o in (Mapping, dict) for o in origins),
            takes_int=int in arms,
            takes_float=float in arms,
            default_config=None if config_cls is None else _default_maker(f, config_cls),
        )
    return kinds


def coerce_fields(config: Any) -> None:
    """Put JSON-ish values of a frozen dataclass's fields into their declared types, in place.

    A list for a field annotated ``tuple[...]`` becomes a tuple; a mapping for a field that
    takes a nested config (``multiplier: MultiplierConfig``) becomes that config: the
    field's default updated by :func:`with_options`; any other mapping for a ``Mapping``
    field is copied into a plain dict, so the config does not share the caller's dict.
    Call it first thing in ``__post_init__``; it then checks every field's type
    (:func:`check_types`).
    """
    for name, kind in _field_kinds(type(config)).items():
        value = getattr(config, name)
        if isinstance(value, list) and kind.takes_tuple:
            value = tuple(value)
        elif isinstance(value, Mapping) and kind.default_config is not None:
            value = with_options(kind.default_config(), value, name)
        elif isinstance(value, Mapping) and kind.takes_mapping:
            value = dict(value)
        elif isinstance(value, float) and kind.takes_int and not kind.takes_float and value.is_integer():
            value = int(value)  # JSON 8.0 for an integer option
        else:
            continue
        object.__setattr__(config, name, value)
    check_types(config)


def with_options(config: ConfigT, overrides: Mapping[str, Any], kind: str = "", *, hint: str = "") -> ConfigT:
    """A copy of dataclass ``config`` with ``overrides`` applied.

    An option that is not a field is an error (:func:`check_options` with ``kind`` and ``hint``).
    A nested config given as a dict is merged key by key into the current one, so
    ``{"multiplier": {"lr": 0.1}}`` changes the step and keeps the rule.
    """
    check_options(overrides, option_names(type(config)), kind, hint=hint)
    changes = dict(overrides)
    for name, value in overrides.items():
        current = getattr(config, name)
        if isinstance(value, Mapping) and is_dataclass(current):
            changes[name] = with_options(current, value, name)
    # Checked before the config's own __post_init__ sees them (whose checks may assume the type).
    hints = _hints(type(config))
    for name, value in changes.items():
        if not is_dataclass(value) and _fits(value, hints[name]) is False and not _coercible(value, hints[name]):
            raise OptionError(f"{type(config).__name__} option {name!r} takes {_type_name_union(hints[name])}, got {value!r}")
    result = replace(config, **changes)
    check_types(result)  # also configs whose __post_init__ does not call coerce_fields
    return result


def _coercible(value: Any, hint: Any) -> bool:
    """Values :func:`coerce_fields` turns into the declared type (a list for a tuple, 8.0 for an int, ...)."""
    if isinstance(value, list):
        return _fits(tuple(value), hint) is not False
    if isinstance(value, float) and value.is_integer():
        return _fits(int(value), hint) is not False
    return isinstance(value, Mapping)


# ------------------------------------------------------------------- saved configs (checkpoints)


class CheckpointError(ValueError):
    """A saved agent cannot be read back; the message names the file and what is wrong."""


def read_saved_json(file: str | Path, keys: Sequence[str] = (), what: str = "saved agent") -> dict[str, Any]:
    """The JSON object in ``file``, which must have ``keys``; :class:`CheckpointError` otherwise."""
    file = Path(file)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CheckpointError(f"{file} is missing: {file.parent} is not a complete {what}; save it again") from None
    except (OSError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{file} cannot be read ({err}); the {what} is damaged, save it again") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise CheckpointError(
            f"{file} is not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}); "
            f"the {what} is damaged or truncated, save it again"
        ) from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{file} must hold a JSON object, not {type(data).__name__}; save the {what} again")
    missing = [k for k in keys if k not in data]
    if missing:
        raise CheckpointError(
            f"{file} lacks {missing}, which a {what} of this kind records; it was edited or not written by save()"
        )
    return data


@contextlib.contextmanager
def reading_checkpoint(file: str | Path, what: str) -> Iterator[None]:
    """Turn an error raised while restoring ``what`` from ``file`` into a :class:`CheckpointError` naming both."""
    try:
        yield
    except CheckpointError:
        raise
    except Exception as err:  # library errors (safetensors, torch, zip) carry no file name
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(
            f"{file}: cannot restore the {what} ({type(err).__name__}: {detail[:300]}); the file is damaged, "
            "truncated or from another agent; save it again"
        ) from err
