"""What a Config field declares about its value, TF-free: `positive`, `at_least`,
`within` and `rule` (a `simclr_tf.config.rules` check), given to the field's declaration
(`fields.field(..., checks=...)`). Each is a callable `(config, name)` that raises
ConfigError naming the flag; `simclr_tf.config.validation.check_fields` runs every field's
checks in one loop, the implicit ones first (`one_of` for a field with choices,
`float32` for a float field). A field whose type is Optional skips its checks when
unset (None). A train mode's own option declares its checks the same way
(`train_modes.option`).

And where a field does something: `applies` (`fields.field(..., applies=...)`), the
one rule by which a flag given where it would do nothing is refused
(`validation.check_inert_flags`)."""
import dataclasses
import math
from typing import Callable, Tuple, Union

from simclr_tf.config import rules
from simclr_tf.config.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Check:
    """A check of one field's value. `reads`: the settings a `rule` passes to its
    function (none: the field's own value); one that reads another setting runs once
    every field's own value is checked (`reads_others`)."""
    reads: Tuple[str, ...] = ()

    def __call__(self, config, name):
        raise NotImplementedError

    def reads_others(self, name):
        return bool(set(self.reads) - {name})


@dataclasses.dataclass(frozen=True)
class _Positive(Check):
    example: str = ""
    unset: str = ""

    def __call__(self, config, name):
        value = getattr(config, name)
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            unset = f", or left unset to {self.unset}" if self.unset else ""
            raise ConfigError(name, f"must be a finite number > 0 ({self.example}){unset}; "
                              f"got {value!r}.")


@dataclasses.dataclass(frozen=True)
class _AtLeast(Check):
    minimum: float = 0

    def __call__(self, config, name):
        value = getattr(config, name)
        if not (math.isfinite(value) and value >= self.minimum):
            raise ConfigError(name, f"must be >= {self.minimum}; got {value!r}.")


@dataclasses.dataclass(frozen=True)
class _Within(Check):
    low: float = 0.0
    high: float = 1.0
    example: str = ""

    def __call__(self, config, name):
        value = getattr(config, name)
        if not self.low < value < self.high:
            raise ConfigError(name, f"must be in ({self.low:g}, {self.high:g}), e.g. "
                              f"{self.example}; got {value!r}.")


@dataclasses.dataclass(frozen=True)
class _Rule(Check):
    check: Callable = None

    def __call__(self, config, name):
        try:
            self.check(*(getattr(config, read) for read in self.reads or (name,)))
        except ValueError as error:
            raise ConfigError.from_rule(name, error) from None


@dataclasses.dataclass(frozen=True)
class _OneOf(Check):
    choices: Union[tuple, Callable] = ()

    def __call__(self, config, name):
        choices = self.choices() if callable(self.choices) else self.choices
        value = getattr(config, name)
        if value not in choices:
            raise ConfigError(name, f"must be one of {', '.join(choices)}; got {value!r}.")


@dataclasses.dataclass(frozen=True)
class _Float32(Check):
    def __call__(self, config, name):
        try:
            rules.check_float32(name, getattr(config, name))
        except ValueError as error:
            raise ConfigError.from_rule(name, error) from None


@dataclasses.dataclass(frozen=True)
class Applies:
    """Where a flag does something: `test(*the values of reads)` is true. `where` says
    where, after 'applies only' (a phrase, or a function returning one, for the names
    of a live table); `fix` is the other way out than dropping the flag."""
    reads: Tuple[str, ...]
    test: Callable
    where: Union[str, Callable]
    fix: str

    def __call__(self, config, name):
        """Raises ConfigError naming `name`, where it applies, the settings that keep
        it from doing anything and the fix, when `test` fails for `config`."""
        values = [getattr(config, read) for read in self.reads]
        if self.test(*values):
            return
        where = self.where() if callable(self.where) else self.where
        settings = ", ".join(f"--{read}={_shown(value)}"
                             for read, value in zip(self.reads, values))
        raise ConfigError(name, f"applies only {where}, so with {settings} it would do "
                          f"nothing: drop it, or {self.fix}.")


def either(names):
    """'a', 'a or b', 'a, b or c'."""
    names = list(names)
    return " or ".join(filter(None, (", ".join(names[:-1]), names[-1])))


def _shown(value):
    return str(value).lower() if isinstance(value, bool) else value


def applies(reads, test, where, fix):
    """Where a field does something (`fields.field(..., applies=...)`): `test(*values)`
    of the settings `reads` names (a tuple, or one name) is true. Given where it is false
    (on the command line or in a flagfile) the flag is refused, naming `where` and
    `fix`; read from a record it is left as the record has it
    (`validation.check_inert_flags`)."""
    return Applies(reads=(reads,) if isinstance(reads, str) else tuple(reads), test=test,
                   where=where, fix=fix)


def positive(example, unset=None):
    """A finite number > 0; `example` says what to pass ('e.g. 256'); `unset` (an
    Optional field) what leaving it unset does ('use --learning_rate')."""
    return _Positive(example=example, unset=unset or "")


def at_least(minimum):
    """A finite number >= `minimum`."""
    return _AtLeast(minimum=minimum)


def within(low, high, example):
    """A number in the open interval (low, high)."""
    return _Within(low=low, high=high, example=example)


def rule(check, *reads):
    """`check(value)`, a `simclr_tf.config.rules` function raising ValueError (its message,
    in the flag's words); with `reads`, `check(*their values)` instead: the Config
    attributes it takes, in order, the field's own included where it goes (a field,
    or a derived property such as 'resolved_stem')."""
    return _Rule(reads=tuple(reads), check=check)


def one_of(choices):
    """One of `choices`: a tuple, or a function returning the live table's names (a
    row registered after import is a choice too)."""
    return _OneOf(choices=choices)


def float32():
    """Representable in float32 (the value the graph sees)."""
    return _Float32()
