"""What ``--help`` says of every config key: its section, type, the value a run with the preset gets (the recipe's
own beside it where the preset changes it) and meaning.

A key's meaning is written once, as the comment on its field's line in the config dataclass (and the comment lines
right under it), or in a comment heading a group of keys, said once above them; this reads those comments from the
source, so the help and the code cannot drift apart.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import re
import textwrap
import types
import typing
from pathlib import Path
from typing import Any, Literal, NamedTuple

FIELD_LINE = re.compile(r"^    (\w+): [^#]*?(?:#\s?(.*))?$")  # a field declared in a class body, its comment
COMMENT_LINE = re.compile(r"^    #\s?(.*)$")  # a comment line under it that goes on with it
PRESETS_PAGE = "docs/presets.md"


class FieldHelp(NamedTuple):
    text: str  # what the field's own comment says ("" if none)
    group: str  # the comment heading the run of fields it belongs to, said once above them ("" if none)


def field_descriptions(cls: type) -> dict[str, FieldHelp]:
    """Each field of dataclass ``cls`` (its bases' included) and what its comments say. A field's own comment is the
    one on its line, with the comment lines under it where the next field has a comment of its own. A comment block
    above fields heads a group: the run of fields without comments right under it, or, after a blank line and above
    a field with a comment, the fields down to the next blank line or comment block. A group of one field is that
    field's own comment."""
    fields: dict[str, list[str]] = {}  # name -> [own comment, group heading]
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        hints = typing.get_type_hints(klass)
        names = {f.name for f in dataclasses.fields(klass) if not dataclasses.is_dataclass(hints[f.name])}
        pending: list[str] = []  # comment lines since the last field (a section, whose keys --help lists, ends it)
        group, previous, open_group = "", None, False  # open: the group runs on past fields with comments
        for line in inspect.getsourcelines(klass)[0]:
            line = line.rstrip()
            field = FIELD_LINE.match(line)
            if field and field.group(1) in names:
                name, own = field.group(1), (field.group(2) or "").strip()
                if pending and own and previous:  # the lines went on with the previous field's comment
                    fields[previous][0] += " " + " ".join(pending)
                elif pending:
                    group, open_group = " ".join(pending), bool(own)
                elif own and not open_group:
                    group = ""
                fields[name] = [own, group]
                pending, previous = [], name
            elif comment := COMMENT_LINE.match(line):
                pending.append(comment.group(1).strip())
            else:
                if pending and previous:
                    fields[previous][0] += " " + " ".join(pending)
                pending, group, previous, open_group = [], "", None, False
    sizes = collections.Counter(group for _, group in fields.values() if group)
    return {name: FieldHelp(" ".join(filter(None, (group, own))).strip(), "") if sizes[group] == 1
            else FieldHelp(own.strip(), group) for name, (own, group) in fields.items()}


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


def keys_help(cls: type, preset_values: dict[str, Any], preset: str) -> str:
    """Every key of config ``cls``, grouped by section: ``key  type = value`` and its meaning under it; a comment
    that heads several keys is said once, above them. The value is the one a run with ``preset`` (whose keys are
    ``preset_values``) and no overrides uses: the preset's, with the recipe's own beside it where they differ."""
    defaults = cls()
    sections: dict[str, list[str]] = {"": []}
    indent = " " * 37

    def collect(klass: type, values: Any, prefix: str) -> None:
        hints = typing.get_type_hints(klass)
        descriptions = field_descriptions(klass)
        more = getattr(klass, "FIELD_HELP", {})  # lines a config adds under a field's comment (data.source's kinds)
        lines, group = sections[prefix.rstrip(".")], ""
        for f in dataclasses.fields(klass):
            key, annotation = f"{prefix}{f.name}", hints[f.name]
            if dataclasses.is_dataclass(annotation):
                sections[key] = []
                collect(annotation, getattr(values, f.name), f"{key}.")
                continue
            text, heading = descriptions[f.name]
            if heading and heading != group:
                lines += textwrap.wrap(heading, 120, initial_indent="  # ", subsequent_indent="  # ")
            group = heading
            default = getattr(values, f.name)
            value = preset_values.get(key, default)
            listed = typing.get_origin(annotation) is tuple and dataclasses.is_dataclass(typing.get_args(annotation)[0])
            kind = "list of sections = ..." if listed else f"{type_name(annotation)} = {shown(value)}"
            if value != default:
                kind += " (the preset's)" if listed else f" (the preset's; the recipe's own: {shown(default)})"
            lines.append(f"  {key:<34} {kind}")
            lines += textwrap.wrap(text, 120, initial_indent=indent, subsequent_indent=indent)
            for extra in more.get(f.name, ()):
                lines += textwrap.wrap(extra, 120, initial_indent=indent + "  ", subsequent_indent=indent + "    ")

    collect(cls, defaults, "")
    lines = textwrap.wrap(f"config keys, as key=value after the flags or in a YAML preset (--config; every preset: "
                          f"{PRESETS_PAGE}). Each value is what a run with the preset {Path(preset).name} and no "
                          "overrides uses; where the preset changes the recipe's own, both are shown (--print-config "
                          "shows the whole config):", 120)
    for section, rows in sections.items():
        if rows:
            lines += [f"\n{section or 'run'}:", *rows]
    return "\n".join(lines)
