"""Kafka error codes, with their retriable flag, and one exception class per code.

The codes come from kio's ErrorCode (generated from Kafka's own error list).
`KafkaError.for_code(code)` gives the exception class for a code; each class has
`code`, `name` and `retriable`, so clients can decide what to retry.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError", "error_class", "raise_for_code"]


class KafkaError(Exception):
    """An error a Kafka broker reported, or one the client maps to a Kafka code."""

    code: int = -1
    name: str = "unknown_server_error"
    retriable: bool = False

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.name)
        self.message = message or self.name

    @staticmethod
    def for_code(code: int) -> type[KafkaError]:
        return error_class(code)


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_")) + "Error"


_BY_CODE: dict[int, type[KafkaError]] = {}
for _ec in ErrorCode:
    if _ec == ErrorCode.none:
        continue
    _cls = type(_camel(_ec.name), (KafkaError,), {"code": int(_ec), "name": _ec.name, "retriable": _ec.retriable})
    _BY_CODE[int(_ec)] = _cls
    globals()[_cls.__name__] = _cls
    __all__.append(_cls.__name__)


def error_class(code: int) -> type[KafkaError]:
    return _BY_CODE.get(code, KafkaError)


def raise_for_code(code: int, message: str | None = None) -> None:
    if code:
        raise error_class(code)(message)
