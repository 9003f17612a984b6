"""``defdataset``: a declarative, immutable dataset record (``data/defdataset`` in the guide).

The Clojure form takes fields, derived bindings computed once, and the protocol methods. The
Python form is a class decorator over annotated fields, with ``@derived`` methods for the
bindings::

    @data.defdataset
    class TinyDataset:
        text: str
        tokenizer: Any
        max_length: int

        @data.derived
        def token_ids(self) -> torch.Tensor:      # computed once, at construction
            return torch.tensor(self.tokenizer.encode(self.text))

        def get_size(self) -> int:
            return len(self.token_ids) - self.max_length

        def get_item(self, idx):
            ids = self.token_ids
            return {"data": ids[idx:idx + self.max_length],
                    "target": ids[idx + 1:idx + self.max_length + 1]}

``TinyDataset(text, tokenizer, 64)`` is the positional constructor; fields and derived values
are read-only afterwards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

from clorch_nb.data.datasets.dataset import TorchInterop
from clorch_nb.errors import ConfigError

__all__ = ["defdataset", "derived"]

T = TypeVar("T")
R = TypeVar("R")


class derived(Generic[R]):  # noqa: N801 - used as a decorator, like property
    """Marks a method of a :func:`defdataset` class as a derived field.

    Derived fields are computed once, in the order they are written, when the record is
    constructed; each may read the fields and the derived fields above it. Afterwards they are
    plain read-only attributes.

    Example:
        >>> @defdataset
        ... class Squares:
        ...     n: int
        ...     @derived
        ...     def values(self) -> list:
        ...         return [i * i for i in range(self.n)]
        ...     def get_size(self) -> int:
        ...         return self.n
        ...     def get_item(self, idx: int) -> int:
        ...         return self.values[idx]
        >>> Squares(4).values
        [0, 1, 4, 9]
    """

    def __init__(self, fn: Callable[[Any], R]) -> None:
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> derived[R]: ...
    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> R: ...
    def __get__(self, obj: object | None, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        try:
            return obj.__dict__[self.name]
        except KeyError:
            raise AttributeError(
                f"derived field {self.name!r} is not computed yet; derived fields may only read "
                "the fields and the derived fields defined above them"
            ) from None

    def __set__(self, obj: object, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(
            f"cannot assign to derived field {self.name!r}: defdataset records are immutable; "
            "build a new one with the constructor"
        )

    def __delete__(self, obj: object) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete derived field {self.name!r}")


def defdataset(cls: type[T]) -> type[T]:
    """Turn a class with annotated fields into an immutable dataset record.

    The class must define ``get_size(self)`` and ``get_item(self, idx)``. Annotated class
    attributes become fields (in order, a positional constructor; defaults allowed as in
    dataclasses); ``@derived`` methods are computed once at construction. The record implements
    :class:`~clorch_nb.data.Dataset`, plus ``len()``/``[]`` for ``torch.utils.data.DataLoader``.
    Equality is identity (fields may be tensors). A ``process_spec`` class attribute or field is
    honoured like :func:`~clorch_nb.data.dataset`'s.

    Args:
        cls (type): the class to convert.

    Returns:
        type: a frozen dataclass, subclass-free (the decorated class itself).

    Raises:
        ConfigError: ``get_size`` or ``get_item`` is missing.
        dataclasses.FrozenInstanceError: (on instances) any assignment to a field or derived
            field.

    Example:
        >>> @defdataset
        ... class Repeat:
        ...     value: str
        ...     times: int
        ...     def get_size(self) -> int:
        ...         return self.times
        ...     def get_item(self, idx: int) -> str:
        ...         return self.value
        >>> ds = Repeat("a", 3)
        >>> len(ds), ds.get_item(2)
        (3, 'a')
        >>> ds.times = 4
        Traceback (most recent call last):
        ...
        dataclasses.FrozenInstanceError: cannot assign to field 'times'
    """
    if not isinstance(cls, type):
        raise ConfigError(f"defdataset decorates a class, got {cls!r}")
    missing = [m for m in ("get_size", "get_item") if not callable(getattr(cls, m, None))]
    if missing:
        raise ConfigError(
            f"defdataset class {cls.__name__} must define {' and '.join(missing)}(...) "
            "(the dataset protocol)"
        )
    derived_fields = [v for v in vars(cls).values() if isinstance(v, derived)]

    user_post_init = getattr(cls, "__post_init__", None)

    def __post_init__(self: Any) -> None:  # noqa: N807 - installed as the dataclass hook
        if user_post_init is not None:
            user_post_init(self)
        for d in derived_fields:
            self.__dict__[d.name] = d.fn(self)

    cls.__post_init__ = __post_init__  # type: ignore[attr-defined]
    for name in ("__len__", "__getitem__"):
        if name not in vars(cls):
            setattr(cls, name, getattr(TorchInterop, name))
    return dataclasses.dataclass(frozen=True, eq=False)(cls)
