"""storage/errors.py and protocol/errors.py never spell two different classes the same way: an
``except`` naming the protocol class around a storage call would silently miss the storage one."""

from odradek.protocol import errors as perr
from odradek.storage import errors as serr


def _classes(module) -> dict[str, type]:
    """The exception classes ``module`` defines itself (not the ones it imports)."""
    return {
        n: c
        for n, c in vars(module).items()
        if isinstance(c, type) and issubclass(c, BaseException) and c.__module__ == module.__name__
    }


def test_no_storage_exception_shares_a_name_with_a_protocol_exception():
    storage, protocol = _classes(serr), _classes(perr)
    assert len(storage) >= 9
    assert storage.keys() & protocol.keys() == set()


def test_every_storage_exception_is_a_storage_error_or_a_record_error_of_the_protocol():
    for name in serr.__all__:
        cls = getattr(serr, name)
        assert issubclass(cls, serr.StorageError) or cls in (serr.CorruptRecordError, serr.InvalidRecordError), name
