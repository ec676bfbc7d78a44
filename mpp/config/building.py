"""Building a run's config: the dataclass defaults (mpp/config/), updated by a YAML preset, updated by dotted
``key=value`` overrides; a preset is named by its name (the installed YAML file of ``mpp/presets/``) or by a file's
path. Every value passes through one coercion step, typed by the field's annotation, so
``train.lr=1e-3`` and ``lr: 1e-3`` in YAML both become floats; an unknown key is an error that lists the valid ones.

Written here rather than taken from OmegaConf's structured configs, which check the same annotations (2.4.0:
``Literal`` values, tuple lengths, booleans) but name an unknown key without listing the valid ones, refuse an
integer written as ``1e3``, and would add a dependency to every install for about 190 lines.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, Optional, Union

import yaml

from mpp.config.help import keys_help
from mpp.errors import ConfigError

# what study/, tools/ and users may import from here
__all__ = [
    "build_config", "config_keys", "config_to_dict", "parse_command_line", "preset_file", "preset_names", "preset_path",
    "save_config",
]

# The presets: a name as --config takes it, or a file of your own.
PRESETS = Path(__file__).parents[1] / "presets"  # installed with the package; recipes/configs/ in a checkout links here


def preset_file(name: str) -> Path:
    """The installed preset of that name (without ``.yaml``)."""
    return PRESETS / f"{name}.yaml"


def preset_names() -> list[str]:
    """Every installed preset's name."""
    return sorted(path.stem for path in PRESETS.glob("*.yaml"))


def preset_path(preset: Union[str, Path]) -> Path:
    """``preset`` as ``--config`` takes it: a bare name (no folder, no suffix) is the installed preset of that name
    (``finetune_own_images_cpu``); anything else, a file's path. Which command reads which preset is written in
    mpp/commands.py."""
    path = Path(preset)
    return path if path.suffix or len(path.parts) > 1 else preset_file(str(path))


# A config from its defaults, a preset and overrides.
def config_keys(cls: type) -> list[str]:
    """Every settable dotted key of a config dataclass, in declaration order."""
    return list(_annotations(cls))


@functools.cache  # resolving annotations was most of building a config, and an experiment checks thousands of runs
def _annotations(cls: type) -> types.MappingProxyType[str, Any]:
    """Every settable dotted key of a config dataclass and its field's annotation, in declaration order."""
    keys = {}
    for f, annotation in _fields(cls):
        if dataclasses.is_dataclass(annotation):
            keys |= {f"{f.name}.{key}": inner for key, inner in _annotations(annotation).items()}
        else:
            keys[f.name] = annotation
    return types.MappingProxyType(keys)


def parsed_yaml(text: str, source: str) -> Any:
    """``text`` parsed as YAML; a syntax error is one ConfigError naming ``source``, the line and column, and what
    the parser found and expected, instead of yaml's traceback."""
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = "" if mark is None else (f", line {mark.line + 1}, column {mark.column + 1}" if "\n" in text.strip()
                                         else f", column {mark.column + 1}")
        said = "; ".join(part for part in (error.context, error.problem) if part)
        raise ConfigError(f"{source}{where}: not valid YAML ({said}); check the brackets, quotes and indentation "
                          "there") from None


def build_config(cls: type, preset: Optional[str | Path] = None, overrides: typing.Sequence[str] = ()) -> Any:
    """The dataclass defaults, updated by a YAML preset, updated by ``key=value`` overrides."""
    return _build(cls, _settings(cls, preset, overrides), prefix="")


def preset_values(cls: type, preset: str | Path) -> dict[str, Any]:
    """The keys ``preset`` sets, each value coerced as ``build_config`` coerces it, but without building the config:
    a preset may leave a key to be given (the paper presets' ``data.source``) and still be shown by ``--help``."""
    annotations = _annotations(cls)
    return {key: _coerce(value, annotations[key], key) for key, value in _settings(cls, preset, ()).items()}


def _settings(cls: type, preset: Optional[str | Path], overrides: typing.Sequence[str]) -> dict[str, Any]:
    """The dotted keys a YAML preset and then ``key=value`` overrides set, as written; an unknown key is refused."""
    values: dict[str, Any] = {}
    if preset is not None:
        path = preset_path(preset)
        if path.is_dir():
            inside = sorted(path.glob("*.yaml"))
            raise ConfigError(f"config file {path} is a directory; give one YAML file, e.g. --config "
                              f"{inside[0] if inside else 'mpp_tiny_cpu'}")
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist; give a preset's name ({', '.join(preset_names())}) "
                              "or the path of a YAML file")
        loaded = parsed_yaml(path.read_text(), f"config file {path}") or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping of keys to values")
        values.update(_flatten(loaded))
    given = {}
    for override in overrides:
        key, sep, value = override.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {override!r} is not of the form key=value (e.g. train.steps=100)")
        given[key.strip()] = value
    values.update(given)
    if hasattr(cls, "preset_keys_giving_way"):  # e.g. a preset's model sizes, where init names a run to fine-tune
        for key in set(cls.preset_keys_giving_way(values)) - set(given):
            values.pop(key, None)
    unknown = [key for key in values if key not in _annotations(cls)]
    if unknown:
        raise ConfigError(_unknown_keys_message(unknown, config_keys(cls)))
    return values


def config_to_dict(config: Any) -> dict[str, Any]:
    """Nested plain dict (tuples as lists), ready for YAML or JSON."""
    return _plain(dataclasses.asdict(config))


def save_config(config: Any, path: Path) -> None:
    path.write_text(yaml.safe_dump(config_to_dict(config), sort_keys=False))


def parse_command_line(cls: type, argv: Optional[typing.Sequence[str]], default_preset: str, description: str,
                       prog: Optional[str] = None) -> Any:
    """A command's command line: ``[--config PRESET] [--resume] [--print-config] [key=value ...]``. ``--help`` lists
    every key by section with its type, the value a run with the preset (``--config``'s, else the command's default
    one) gets, and its meaning; ``--print-config`` prints the resolved config as YAML and exits, building nothing."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=default_preset,
                        help=f"a preset's name, or a YAML file's path (default: {default_preset})")
    if {"-h", "--help"} & set(argv):  # the keys' help reads the preset and the configs' source: only when shown
        preset = parser.parse_known_args([arg for arg in argv if arg not in ("-h", "--help")])[0].config
        parser.epilog = keys_help(cls, preset_values(cls, preset), str(preset_path(preset)))
    resumes = "resume" in {field.name for field in dataclasses.fields(cls)}  # a run; an experiment just continues
    if resumes:
        parser.add_argument("--resume", action="store_true",
                            help="continue the run in output_dir, or without one the newest run of this recipe under "
                                 "runs/ (same as resume=auto)")
    parser.add_argument("--print-config", action="store_true",
                        help="print the config the preset and overrides make, as YAML, and exit")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help=f"dotted overrides, e.g. {getattr(cls, 'OVERRIDE_EXAMPLE', 'train.steps=100')}")
    args = parser.parse_intermixed_args(argv)  # flags before, between or after the overrides
    overrides = list(args.overrides) + (["resume=auto"] if resumes and args.resume else [])
    config = build_config(cls, args.config, overrides)
    if args.print_config:
        print(yaml.safe_dump(config_to_dict(config), sort_keys=False), end="")
        raise SystemExit(0)
    return config


@functools.cache
def _fields(cls: type) -> tuple[tuple[dataclasses.Field, Any], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f, hints[f.name]) for f in dataclasses.fields(cls))


def _flatten(mapping: dict, prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in mapping.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, prefix=f"{dotted}."))
        else:
            flat[dotted] = value
    return flat


def _build(cls: type, values: dict[str, Any], prefix: str, defaults: Any = None) -> Any:
    """``cls`` from ``values``; a section starts from its field's default factory (a recipe's own defaults)."""
    kwargs = {}
    for f, annotation in _fields(cls):
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(annotation):
            kwargs[f.name] = _build(annotation, values, prefix=f"{key}.", defaults=f.default_factory())
        elif key in values:
            kwargs[f.name] = _coerce(values[key], annotation, key)
    return cls(**kwargs) if defaults is None else dataclasses.replace(defaults, **kwargs)


_TRUE, _FALSE = {"true", "yes", "on", "1"}, {"false", "no", "off", "0"}


def _coerce(value: Any, annotation: Any, key: str) -> Any:
    """``value`` (from YAML or the command line) as the type ``annotation`` declares, or a ConfigError."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.strip().lower() in {"null", "none", "~", ""}):
            return None
        (inner,) = [arg for arg in args if arg is not type(None)]
        return _coerce(value, inner, key)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}={value!r} is not one of: {', '.join(map(str, args))}")
        return value
    if origin is tuple:
        items = parsed_yaml(value, f"{key}={value}") if isinstance(value, str) else value
        item_type = args[0]
        if not isinstance(items, (list, tuple)):
            example = f"[{items}]" if item_type is str else "[0.5,0.5,0.5]"
            raise ConfigError(f"{key}={value!r} must be a list, e.g. {key}={example}")
        if args[-1] is not Ellipsis and len(items) != len(args):
            raise ConfigError(f"{key}={value!r} must have {len(args)} items")
        if dataclasses.is_dataclass(item_type):
            return tuple(_item(item, item_type, f"{key}[{index}]") for index, item in enumerate(items))
        return tuple(_coerce(item, item_type, key) for item in items)
    try:
        if annotation is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text not in _TRUE | _FALSE:
                raise ValueError
            return text in _TRUE
        if annotation is int:
            number = float(value) if isinstance(value, str) else value
            if isinstance(value, bool) or number != int(number):
                raise ValueError
            return int(number)
        if annotation is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if annotation is str:
            return str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}={value!r} is not a valid {annotation.__name__}") from None
    raise TypeError(f"unsupported config annotation {annotation!r} for {key}")


def _item(value: Any, cls: type, key: str) -> Any:
    """One item of a list of sections (a mapping in YAML) as ``cls``."""
    valid = config_keys(cls)
    if not isinstance(value, dict):
        raise ConfigError(f"{key}={value!r} must be a mapping of {', '.join(valid)}")
    values = _flatten(value)
    unknown = [name for name in values if name not in valid]
    if unknown:
        raise ConfigError(f"{key}: " + _unknown_keys_message(unknown, valid))
    return _build(cls, {f"{key}.{name}": item for name, item in values.items()}, prefix=f"{key}.")


def _unknown_keys_message(unknown: list[str], valid: list[str]) -> str:
    lines = []
    for key in unknown:
        close = difflib.get_close_matches(key, valid, n=1)
        lines.append(f"unknown config key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return "\n".join(lines) + "\nvalid keys: " + ", ".join(valid)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value
