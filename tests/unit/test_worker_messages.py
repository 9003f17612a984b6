"""The process workers' wire protocol as named records (issue 29): every message kind survives
:func:`encode`/:func:`decode` with its type and fields, pickles as itself too, and travels as a
plain ``(tag, *fields)`` tuple (a tuple pickles in C; a NamedTuple through Python hooks)."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from clorch_nb.data.workers import messages as m
from clorch_nb.data.workers.shm import EncodedBatch

BLOB = m.ExceptionBlob.capture(ValueError("bad item 3"))
ENC = EncodedBatch(b"struct", [], 0, None, b"")
EVERY_KIND: list[Any] = [
    m.StartEpoch(2, 99),
    m.Task(2, 5, b"\x01\x00\x00\x00\x00\x00\x00\x00", [3, 4]),
    m.Cancel(2),
    m.Stop(),
    m.Free([1]),
    m.Built(2, 5, 1, 0.5, 0.25, ENC, 10.0, 11.0, (), b"w"),
    m.Failed(2, 5, 1, BLOB, b""),
    m.Ended(2, 6),
    m.Ack(2),
    m.Ready(2),
    m.Short(),
    m.InitError(BLOB),
]


def test_every_kind_is_listed_once() -> None:
    assert {type(msg) for msg in EVERY_KIND} == set(m.Message.__args__)  # type: ignore[attr-defined]
    assert len(EVERY_KIND) == 12


@pytest.mark.parametrize("msg", EVERY_KIND, ids=lambda x: type(x).__name__)
def test_a_message_arrives_as_the_record_it_was(msg: Any) -> None:
    got = m.decode(m.encode(msg))
    assert type(got) is type(msg) and got == msg
    assert pickle.loads(pickle.dumps(msg)) == msg  # a record is an ordinary picklable value


def test_the_wire_is_a_plain_tuple_with_a_tag() -> None:
    wire = pickle.loads(m.encode(m.Task(2, 5, b"", [])))
    assert type(wire) is tuple and wire[1:] == (2, 5, b"", [])
    assert isinstance(wire[0], int)


def test_fields_are_read_by_name() -> None:
    built = m.decode(m.encode(EVERY_KIND[5]))
    assert (built.batch_index, built.batch, built.warnings) == (5, ENC, b"w")
    failed = m.decode(m.encode(EVERY_KIND[6]))
    assert failed.error.type_name == "builtins.ValueError" and failed.error.message == "bad item 3"
