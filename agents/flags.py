"""Command-line flags derived from config dataclasses, so a setting is declared once, with its help.

Each field becomes `--field-name` (its type, its attribute docstring as help; `setting(...)` adds aliases,
choices and a metavar). Values given with `--set KEY=VALUE` are checked against the same type hints.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import textwrap
import types
import typing
from functools import lru_cache
from typing import Any, Iterable, Mapping


def setting(default: Any = dataclasses.MISSING, *, flag: str | None = None, flags: Iterable[str] = (),
            hidden_flags: Iterable[str] = (), choices: Iterable[str] = (), value_aliases: Mapping[str, str] = {},
            metavar: str | None = None, cli: bool = True, default_factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field with what its flag needs beyond the type and docstring. flag: the flag's name when it
    is not --field-name; flags: other spellings, shown in help; hidden_flags: earlier spellings that keep
    working, not shown; value_aliases: earlier spellings of a choice, e.g. {"disabled": "off"}. cli=False: no
    flag."""
    metadata = {"flag": flag, "flags": tuple(flags), "hidden_flags": tuple(hidden_flags), "choices": tuple(choices),
                "value_aliases": dict(value_aliases), "metavar": metavar, "cli": cli}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """The attribute docstring of every field of `cls` and its bases (the string right after the field)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body
        for node, following in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                    and isinstance(following.value.value, str)):
                docs[node.target.id] = " ".join(following.value.value.split())
    return docs


def add_dataclass_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls: type, *,
                            skip: Iterable[str] = (), defaults: Mapping[str, Any] | None = None) -> None:
    """A flag per field of `cls`. Flags default to None ("not given") unless `defaults` names a value, so
    that settings can be layered (a launch script's defaults, a config file, then flags)."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    for field in dataclasses.fields(cls):
        meta = field.metadata
        if field.name in skip or not meta.get("cli", True):
            continue
        kind, optional = _base_type(hints[field.name])
        names = [meta.get("flag") or f"--{field.name.replace('_', '-')}", *meta.get("flags", ())]
        options: dict[str, Any] = {"dest": field.name, "default": (defaults or {}).get(field.name),
                                   "help": _help(docs.get(field.name, ""), field)}
        if kind is bool:
            options["action"] = argparse.BooleanOptionalAction
        else:
            options["type"] = _parser_for(kind, optional, field.name, meta.get("value_aliases", {}))
            options["metavar"] = meta.get("metavar") or (kind.__name__.upper() if kind in (int, float) else None)
            if meta.get("choices"):
                options["choices"] = list(meta["choices"])
                options.pop("metavar")
        parser.add_argument(*names, **options)
        if meta.get("hidden_flags"):
            parser.add_argument(*meta["hidden_flags"], **{**options, "default": argparse.SUPPRESS,
                                                          "help": argparse.SUPPRESS})


def check_value(cls: type, name: str, value: Any) -> Any:
    """`value` for field `name` of `cls`, converted where that is lossless (an int for a float); ValueError
    saying what was expected otherwise."""
    hints = typing.get_type_hints(cls)
    if name not in hints:
        raise ValueError(f"{cls.__name__} has no field {name!r}")
    kind, optional = _base_type(hints[name])
    if value is None:
        if optional:
            return None
        raise ValueError(f"{name} needs a {kind.__name__} value, not nothing")
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif kind in (int, str):
        ok = isinstance(value, kind) and not isinstance(value, bool)
    else:
        ok = True  # containers and unions of several types: the config's own checks decide
    if not ok:
        article = "an" if kind is int else "a"
        raise ValueError(f"{name} needs {article} {kind.__name__}{' or null' if optional else ''}, not {value!r}")
    return value


def _base_type(hint: Any) -> tuple[Any, bool]:
    """(the type, whether None is allowed) of `X`, `X | None` or `Optional[X]`."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else Any), True
    origin = typing.get_origin(hint)
    return (origin or hint), False


def _parser_for(kind: Any, optional: bool, name: str, value_aliases: Mapping[str, str] = {}):
    if kind not in (int, float, str):
        return str

    def parse(text: str):
        if optional and text.lower() in ("none", "null"):
            return None
        text = value_aliases.get(text, text)
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name.replace('_', '-')} needs {'an' if kind is int else 'a'} "
                                             f"{kind.__name__}, not {text!r}") from None

    parse.__name__ = kind.__name__
    return parse


def _help(doc: str, field: dataclasses.Field) -> str:
    text = doc.split(". ")[0].rstrip(".") if doc else ""
    default = field.default if field.default is not dataclasses.MISSING else None
    if default not in (None, "", ()) and not isinstance(default, bool):
        text += f" (default {default})"
    return text.replace("%", "%%")
