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
  dict is merged key by key into the current one.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, Field, dataclass, fields, is_dataclass, replace
from typing import Any, TypeVar

__all__ = ["check_options", "coerce_fields", "option_names", "with_options"]

ConfigT = TypeVar("ConfigT")


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
    ValueError: unknown multiplier option(s) ['lrr']; valid options: ['init', 'lr']
    """
    valid = sorted(valid)
    unknown = sorted(set(given) - set(valid))
    if unknown:
        what = f"{kind} option(s)" if kind else "option(s)"
        raise error(f"unknown {what} {unknown}; valid options: {valid}{hint}")


@dataclass(frozen=True)
class _FieldKind:
    takes_tuple: bool
    takes_mapping: bool
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
            default_config=None if config_cls is None else _default_maker(f, config_cls),
        )
    return kinds


def coerce_fields(config: Any) -> None:
    """Put JSON-ish values of a frozen dataclass's fields into their declared types, in place.

    A list for a field annotated ``tuple[...]`` becomes a tuple; a mapping for a field that
    takes a nested config (``multiplier: MultiplierConfig``) becomes that config: the
    field's default updated by :func:`with_options`; any other mapping for a ``Mapping``
    field is copied into a plain dict, so the config does not share the caller's dict.
    Call it first thing in ``__post_init__``.
    """
    for name, kind in _field_kinds(type(config)).items():
        value = getattr(config, name)
        if isinstance(value, list) and kind.takes_tuple:
            value = tuple(value)
        elif isinstance(value, Mapping) and kind.default_config is not None:
            value = with_options(kind.default_config(), value, name)
        elif isinstance(value, Mapping) and kind.takes_mapping:
            value = dict(value)
        else:
            continue
        object.__setattr__(config, name, value)


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
    return replace(config, **changes)
