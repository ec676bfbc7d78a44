"""What ``--help`` says of every config key: its section, type, default and meaning.

A key's meaning is written once, as the comment on its field's line in the config dataclass (and the comment lines
right under it); this reads those comments from the source, so the help and the code cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import textwrap
import types
import typing
from typing import Any, Literal

FIELD_LINE = re.compile(r"^    (\w+): [^#]*?(?:#\s?(.*))?$")  # a field declared in a class body, its comment
COMMENT_LINE = re.compile(r"^    #\s?(.*)$")  # a comment line under it that goes on with it
PRESETS_PAGE = "docs/presets.md"


def field_descriptions(cls: type) -> dict[str, str]:
    """Each field of dataclass ``cls`` (its bases' included) and the comment that says what it is ("" if none): the
    comment on its line, with the comment lines under it where the next field has a comment of its own, after a
    comment block heading it; or a comment block right above a run of fields that have none, which it describes
    together."""
    descriptions: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        names = {f.name for f in dataclasses.fields(klass)}
        pending: list[str] = []  # comment lines since the last field
        group, previous = "", None
        for line in inspect.getsourcelines(klass)[0]:
            line = line.rstrip()
            field = FIELD_LINE.match(line)
            if field and field.group(1) in names:
                name, own = field.group(1), (field.group(2) or "").strip()
                if own:
                    if pending and previous:  # the lines went on with the previous field's comment
                        descriptions[previous] += " " + " ".join(pending)
                    elif pending:  # a block heading this field, after a blank line
                        own = " ".join(pending) + "; " + own
                    group = ""
                elif pending:
                    group = " ".join(pending)
                descriptions[name] = own or group
                pending, previous = [], name
            elif comment := COMMENT_LINE.match(line):
                pending.append(comment.group(1).strip())
            else:
                if pending and previous:
                    descriptions[previous] += " " + " ".join(pending)
                pending, group, previous = [], "", None
    return {name: text.strip() for name, text in descriptions.items()}


def type_name(annotation: Any) -> str:
    """A field's type as a reader of the command line writes it: ``int``, ``float or null``, ``one of a|b``,
    ``list of float``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [arg for arg in args if arg is not type(None)]
        return f"{type_name(inner)} or null"
    if origin is Literal:
        return "one of " + "|".join(map(str, args))
    if origin is tuple:
        return f"list of {type_name(args[0])}"
    return getattr(annotation, "__name__", str(annotation))


def shown(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(shown(item) for item in value) + "]"
    return repr(value) if isinstance(value, str) else str(value)


def keys_help(cls: type) -> str:
    """Every key of config ``cls``, grouped by section: ``key  type = default  meaning``, the defaults being the
    recipe's own (before any preset)."""
    defaults = cls()
    sections: dict[str, list[tuple[str, str, str]]] = {"": []}

    def collect(klass: type, values: Any, prefix: str) -> None:
        hints = typing.get_type_hints(klass)
        descriptions = field_descriptions(klass)
        more = getattr(klass, "FIELD_HELP", {})  # what a config adds to a field's comment (data.source's kinds)
        for f in dataclasses.fields(klass):
            annotation = hints[f.name]
            if dataclasses.is_dataclass(annotation):
                sections[f"{prefix}{f.name}"] = []
                collect(annotation, getattr(values, f.name), f"{prefix}{f.name}.")
                continue
            listed = typing.get_origin(annotation) is tuple and dataclasses.is_dataclass(typing.get_args(annotation)[0])
            kind = "list of sections = ..." if listed else f"{type_name(annotation)} = {shown(getattr(values, f.name))}"
            meaning = " ".join(filter(None, (descriptions[f.name], more.get(f.name, ""))))
            sections[prefix.rstrip(".")].append((f"{prefix}{f.name}", kind, meaning))

    collect(cls, defaults, "")
    lines = textwrap.wrap(f"config keys, as key=value after the flags or in a YAML preset (--config; every preset: "
                          f"{PRESETS_PAGE}). Defaults are the recipe's own; a preset changes some (--print-config "
                          "shows the result):", 120)
    for section, rows in sections.items():
        if not rows:
            continue
        lines.append(f"\n{section or 'run'}:")
        for key, kind, meaning in rows:
            lines.append(f"  {key:<34} {kind}")
            lines += textwrap.wrap(meaning, 120, initial_indent=" " * 37, subsequent_indent=" " * 37)
    return "\n".join(lines)
