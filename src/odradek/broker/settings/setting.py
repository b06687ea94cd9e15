"""What a broker setting is: its name, type, default and doc, how its value is parsed and checked,
and whether it is per-topic, dynamic or declared but not implemented yet (`planned`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any

LONG_MAX = 9223372036854775807
INT_MAX = 2147483647


class ConfigError(ValueError):
    pass


def _bool(v: str) -> bool:
    s = v.strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise ValueError(f"expected true or false, got {v!r}")


def _int(v: str) -> int:
    return int(v.strip())


def _float(v: str) -> float:
    return float(v.strip())


def _str(v: str) -> str:
    return v.strip()


def _list(v: str) -> list[str]:
    return [p.strip() for p in v.split(",") if p.strip()]


TYPES: dict[str, Callable[[str], Any]] = {
    "bool": _bool,
    "int": _int,
    "long": _int,
    "double": _float,
    "string": _str,
    "list": _list,
    "password": _str,
}


@dataclass(frozen=True)
class Setting:
    """Name, type, default and doc by position; everything else by keyword (a flag passed by
    position reads as a bare `True` nobody can place)."""

    name: str
    type: str
    default: Any
    doc: str
    _: KW_ONLY
    validate: Callable[[Any], str | None] | None = None
    topic_name: str | None = None  # the per-topic override name, if any
    dynamic: bool = False  # may change at runtime via AlterConfigs
    # Declared (so Describe shows Kafka's default) but not implemented: what it waits for.
    # Setting it explicitly is refused: startup stops, AlterConfigs/CreateTopics answer INVALID_CONFIG.
    planned: str = ""

    def parse(self, raw: str) -> Any:
        """The value of an explicitly given setting; a planned one is refused (ConfigError)."""
        if self.planned:
            raise ConfigError(f"setting {self.name} is not implemented yet (it waits for {self.planned})")
        shown = "[hidden]" if self.type == "password" else repr(raw)  # a secret is never in a message
        try:
            value = TYPES[self.type](raw)
        except ValueError as e:
            raise ConfigError(f"invalid value {shown} for setting {self.name}: {e}") from None
        if self.validate is not None:
            problem = self.validate(value)
            if problem:
                raise ConfigError(f"invalid value {shown} for setting {self.name}: {problem}")
        return value


def at_least(n: float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= n else f"must be at least {n}"


def between(lo: float, hi: float) -> Callable[[Any], str | None]:
    return lambda v: None if lo <= v <= hi else f"must be between {lo} and {hi}"


def one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}"
