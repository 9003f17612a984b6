"""Words the package writes in many places, written once: plurals, runs of integers, item
positions in a batch and key paths into an item or a batch.

A key path is a :data:`KeyPath`: the keys (mapping keys) and field positions (tuple fields) from
the item (or batch) to a field, e.g. ``("meta", "box")`` or ``("pair", 0)``; ``()`` is the
item (or batch) itself. Errors, views and texts all take this one type and write it with
:func:`key_path_text` (prose) or :func:`key_path_label` (a short label for a tree or legend).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "KeyPath",
    "key_path_label",
    "key_path_text",
    "plural",
    "positions_text",
    "ranges",
    "subscripts",
]

KeyPath = tuple[str | int, ...]


def plural(n: int, word: str, many: str | None = None, *, number: bool = True) -> str:
    """``n`` and ``word``, in the plural unless ``n == 1``.

    Args:
        n (int): the count.
        word (str): the singular.
        many (str | None): the plural, when it is not ``word + "s"``.
        number (bool): False leaves the count out (the word alone, agreeing with ``n``).

    Returns:
        str: e.g. ``"1 item"``, ``"3 items"``, ``"2 batches"``.

    Example:
        >>> plural(1, "item"), plural(3, "item"), plural(2, "index", "indices")
        ('1 item', '3 items', '2 indices')
        >>> plural(4, "batch", "batches", number=False)
        'batches'
    """
    noun = word if n == 1 else (many or word + "s")
    return f"{n} {noun}" if number else noun


def ranges(values: Iterable[int], limit: int = 12) -> str:
    """Integers as sorted runs: ``[0, 1, 2, 5, 6]`` -> ``"0-2, 5, 6"`` (a run of three or more
    written ``a-b``), cut after ``limit`` runs.

    Args:
        values (Iterable[int]): the integers (any order, duplicates kept as given).
        limit (int): runs written before ``", ... (N in all)"``.

    Returns:
        str: the runs, comma separated; ``""`` for no values.

    Example:
        >>> ranges([5, 0, 1, 2, 6]), ranges(range(0, 40, 2), limit=3)
        ('0-2, 5, 6', '0, 2, 4, ... (20 in all)')
    """
    vals = sorted(values)
    runs: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        if j - i >= 2:
            runs.append(f"{vals[i]}-{vals[j]}")
        else:  # one or two values: written out ("3, 4" reads better than "3-4")
            runs.append(", ".join(map(str, vals[i : j + 1])))
        i = j + 1
    shown = ", ".join(runs[:limit])
    return shown + (f", ... ({len(vals)} in all)" if len(runs) > limit else "")


def positions_text(positions: Iterable[int], limit: int = 8) -> str:
    """Item positions in a batch, in words: ``"position 4"``, ``"positions 0-3, 5"``.

    Example:
        >>> positions_text([4]), positions_text([0, 1, 2, 3, 5])
        ('position 4', 'positions 0-3, 5')
    """
    pos = list(positions)
    return f"position{'s' if len(pos) > 1 else ''} {ranges(pos, limit)}"


def subscripts(path: KeyPath) -> str:
    """A key path as the subscripts that reach it: ``("meta", 0)`` -> ``"['meta'][0]"``.

    Example:
        >>> "batch" + subscripts(("meta", 0))
        "batch['meta'][0]"
    """
    return "".join(f"[{k!r}]" for k in path)


def key_path_text(path: KeyPath) -> str:
    """A key path in prose, as error messages and views write it.

    Args:
        path (KeyPath): keys and tuple positions from the item to the field.

    Returns:
        str: ``"key 'data'"`` for one key, ``"key ['meta']['box']"`` for a nested one (how the
        batch is indexed), ``"the items themselves"`` for ``()``.

    Example:
        >>> key_path_text(("data",)), key_path_text(("meta", 0)), key_path_text(())
        ("key 'data'", "key ['meta'][0]", 'the items themselves')
    """
    if not path:
        return "the items themselves"
    if len(path) == 1:
        return f"key {path[0]!r}"
    return "key " + subscripts(path)


def key_path_label(path: KeyPath) -> str:
    """A key path as a short label for a tree or a legend: the keys joined by ``/``.

    Example:
        >>> key_path_label(("meta", "id")), key_path_label(())
        ('meta/id', '<batch>')
    """
    return "/".join(str(k) for k in path) if path else "<batch>"
