"""protocol/errors.py: one class per kio ErrorCode, written out as code and kept current."""

import importlib.util
from pathlib import Path

import pytest

from odradek.protocol import errors
from odradek.protocol.errors import ErrorCode, KafkaError, NotLeaderOrFollowerError, error_class, raise_for_code

ROOT = Path(__file__).resolve().parents[3]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_errors", ROOT / "scripts" / "gen-errors.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generated_classes_are_current_with_installed_kio():
    gen = _generator()
    text = gen.TARGET.read_text()
    assert gen.render(text) == text, "protocol/errors.py is out of date with kio: run python scripts/gen-errors.py"


def test_every_code_but_none_has_its_class():
    for ec in ErrorCode:
        cls = error_class(int(ec))
        if ec == ErrorCode.none:
            assert cls is KafkaError
            continue
        assert cls.__module__ == errors.__name__
        assert (cls.code, cls.name, cls.retriable) == (int(ec), ec.name, ec.retriable)
        assert cls.__name__ in errors.__all__


def test_raise_for_code():
    raise_for_code(0)
    with pytest.raises(NotLeaderOrFollowerError) as info:
        raise_for_code(6, "moved")
    assert info.value.message == "moved" and info.value.retriable
    with pytest.raises(KafkaError) as info:
        raise_for_code(31999)
    assert type(info.value) is KafkaError


def test_a_second_class_for_a_code_is_refused():
    with pytest.raises(TypeError, match="error code 6 has two classes"):

        class Again(KafkaError, code=6, name="not_leader_or_follower", retriable=True): ...

    assert error_class(6) is NotLeaderOrFollowerError


def test_invalid_record_is_one_class_from_the_codec_to_the_client():
    """What the codec and the validator raise, what ReplicaManager maps to INVALID_RECORD and
    what a client raises for that code are one class (as Kafka's InvalidRecordException): an
    ``except`` naming it catches them all."""
    from odradek.protocol import records
    from odradek.storage import errors as storage_errors

    cls = error_class(ErrorCode.invalid_record)
    assert cls is errors.InvalidRecordError is records.InvalidRecordError is storage_errors.InvalidRecordError
    # two records, the last offset delta saying eight: well formed, not acceptable
    batch = records.build_batch(
        [records.Record(0, 1, b"k", b"v"), records.Record(5, 2, b"k", b"w")], last_offset_delta=7
    )
    with pytest.raises(cls):
        records.validate_batch(batch, strict=True)
