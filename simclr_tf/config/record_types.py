"""A record's JSON values against the types of the fields they set: `check` raises
`RecordError` naming the file and the key (`"use_blur": "false"` would read as true,
`"image_size": 16.0` is no image size), with the value meant where it is plain.
`Config.check_record` applies it to the Config's fields.
"""
import json
import typing


class RecordError(ValueError):
    """A record of a run directory that cannot be read back as it is (a value of the
    wrong type: `Config.check_record`); names the file and the key."""


def _of_type(kind, value):
    """Whether the JSON `value` is one of the field type `kind` (JSON has one kind of
    number: an int is a float's value, a float with a point is no int's)."""
    if typing.get_origin(kind) is typing.Union:  # Optional[...]
        return any(_of_type(k, value) for k in typing.get_args(kind))
    if kind is type(None):
        return value is None
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return not isinstance(kind, type) or isinstance(value, kind)


def _expected(kind):
    if typing.get_origin(kind) is typing.Union:
        return " or ".join(_expected(k) for k in typing.get_args(kind))
    return {bool: "true or false", int: "a whole number", float: "a number",
            str: "a string", type(None): "null"}.get(kind, getattr(kind, "__name__", kind))


def _kind(value):
    """What a JSON value is, where its text does not say it ('' where it does)."""
    if isinstance(value, str):
        return "a string"
    if isinstance(value, float):
        return "a decimal number"
    return {list: "a list", dict: "an object"}.get(type(value), "")


def _example(kind, value):
    """The value a record meant (`"false"` for false, 16.0 for 16), as JSON, or None."""
    kinds = typing.get_args(kind) if typing.get_origin(kind) is typing.Union else (kind,)
    if bool in kinds and isinstance(value, str) and value.strip().lower() in (
            "true", "false"):
        return value.strip().lower()
    if int in kinds and isinstance(value, float) and value.is_integer():
        return json.dumps(int(value))
    return None


def check(types, values, path, where=""):
    """Raises RecordError naming `path` and the key when a value of `values` is not of
    the type `types` gives its key; keys without a type are left to the reader.

    Args:
        types: {key: field type}.
        values: {key: value} as read from JSON.
        path: the record's file, for the message.
        where: where in the file `values` are (e.g. 'entry 3's "changed"').
    """
    for key, value in values.items():
        if key in types and not _of_type(types[key], value):
            example = _example(types[key], value)
            kind = _kind(value)
            raise RecordError(
                f"{path!r}{' ' + where if where else ''} records \"{key}\": "
                f"{json.dumps(value)}{f' ({kind})' if kind else ''}, but --{key} "
                f"takes {_expected(types[key])}: correct it in that file"
                + (f' ("{key}": {example})' if example is not None else "") + ".")
