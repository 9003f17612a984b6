"""What a replayed batch holds, sample by sample, as plain data (no ipywidgets or matplotlib):
the numbers :class:`~clorch_nb.widgets.replay_view.ReplayView` draws.

A batch is split back into its samples (row ``i`` of every tensor field, item ``i`` of every list
field) and shown the way its content reads best:

* **images**: a tensor field of shape ``(B, H, W)``, ``(B, 1, H, W)`` or ``(B, 3, H, W)``
  (H, W >= 4): a grid;
* **text**: a field of strings, or an integer ``(B, L)`` field with a ``decode=`` function that
  turns one row of token ids into text: the decoded tokens;
* **anything else**: a table of each sample's fields.

Every sample carries its provenance: its dataset index and the batch's RNG seed, and for a
``shard_dataset`` where it is stored (shard file and offset in it: ``shard-00004.tar:17``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from clorch_nb.data import ReplayedBatch, ShardItem

__all__ = ["ReplayReport", "SampleRow", "replay_report", "split_batch"]

Kind = Literal["images", "text", "table"]

#: field names taken as a sample's target (shown beside its index in a grid)
TARGET_KEYS = ("target", "label", "labels", "y", "cls")


@dataclass(frozen=True)
class SampleRow:
    """One sample of a replayed batch.

    Attributes:
        position (int): its row in the batch.
        index (int): its dataset index.
        seed (int): the batch's RNG seed (every sample of a batch shares it).
        fields (dict[str, str]): each field of the sample, shortened for a table.
        shard_item (ShardItem | None): a ``shard_dataset`` sample's shard and offset, else None.
    """

    position: int
    index: int
    seed: int
    fields: dict[str, str]
    shard_item: ShardItem | None = None

    @property
    def label(self) -> str:
        """Its short name in a grid: ``#index``, plus ``s{shard}:{offset}`` for a shard sample.

        Example:
            >>> from clorch_nb.data import ShardItem
            >>> SampleRow(0, 25, 7, {}, ShardItem(4, "/d/shard-00004.tar", 2)).label
            '#25 s4:2'
        """
        item = self.shard_item
        return f"#{self.index}" if item is None else f"#{self.index} s{item.shard}:{item.offset}"


@dataclass(frozen=True)
class ReplayReport:
    """A replayed batch, sample by sample (see the module docstring).

    Attributes:
        title (str): ``"epoch e, rank r, batch b"``.
        seed (int): the batch's RNG seed.
        kind ("images" | "text" | "table"): how the samples are shown.
        key (str | None): the field shown as images or text.
        rows (list[SampleRow]): one per sample, in batch order.
        images (list[np.ndarray]): with ``kind == "images"``: each sample's ``(H, W)`` or
            ``(H, W, 3)`` float array in [0, 1] (scaled per batch), else empty.
        texts (list[str]): with ``kind == "text"``: each sample's text, else empty.
    """

    title: str
    seed: int
    kind: Kind
    key: str | None
    rows: list[SampleRow]
    images: list[np.ndarray]
    texts: list[str]

    @property
    def target_key(self) -> str | None:
        """The field that is each sample's target: one named ``target``, ``label``, ``labels``,
        ``y`` or ``cls``; else, for ``(x, y)`` items (fields ``"0"`` and ``"1"``, torch's
        ``[x, y]``), the one field beside the images; None when there is none.

        Example:
            >>> import torch
            >>> from clorch_nb import data
            >>> ds = data.tensor_dataset(torch.rand(4, 8, 8), torch.arange(4))
            >>> loader = data.dataloader(ds, batch_size=2, shuffle=False)
            >>> replay_report(data.replay(loader, epoch=0, batch=1)).target_key
            'target'
            >>> pairs = [(torch.rand(8, 8), k) for k in range(4)]  # (x, y) items
            >>> loader = data.DataLoader(pairs, batch_size=2)
            >>> replay_report(data.replay(loader, epoch=0, batch=1)).target_key
            '1'
        """
        if not self.rows:
            return None
        fields = list(self.rows[0].fields)
        named = next((k for k in TARGET_KEYS if k in fields), None)
        if named is not None:
            return named
        others = [k for k in fields if k != self.key]
        return others[0] if self.kind == "images" and len(others) == 1 else None

    @property
    def has_shards(self) -> bool:
        """The samples come from a ``shard_dataset`` (each has a shard and offset)."""
        return bool(self.rows) and self.rows[0].shard_item is not None

    def to_text(self) -> str:
        """The provenance line, then one line per sample: position, dataset index, shard file
        and offset (a ``shard_dataset``), seed and fields (or its text)."""
        lines = [
            f"Replayed batch ({self.title}): {len(self.rows)} samples, seed {self.seed}; "
            "same indices and seed as delivered, so the same augmentation"
        ]
        keys = [k for k in (self.rows[0].fields if self.rows else {}) if k != self.key]
        shown = {"text": f"{self.key} (text)", "images": f"{self.key} (image)"}.get(self.kind)
        where = ["shard:offset"] if self.has_shards else []
        table = [["pos", "index", *where, "seed", *keys, *([shown] if shown else [])]]
        for r in self.rows:
            at = [str(r.shard_item)] if self.has_shards else []
            cells = [str(r.position), str(r.index), *at, str(r.seed), *(r.fields[k] for k in keys)]
            if self.kind == "text":
                cells.append(repr(self.texts[r.position]))
            elif self.kind == "images" and self.key is not None:
                cells.append(r.fields[self.key])
            table.append(cells)
        widths = [max(len(row[c]) for row in table) for c in range(len(table[0]))]
        for row in table:
            lines.append(
                "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            )
        return "\n".join(lines)


def split_batch(batch: Any, n: int) -> list[dict[str, Any]]:
    """The ``n`` samples of a collated ``batch`` as dicts of fields (a dict batch keeps its keys;
    a list or tuple batch gets keys ``"0"``, ``"1"``, ...; anything else is one field ``"batch"``).

    Example:
        >>> split_batch({"x": torch.arange(4).view(2, 2), "name": ["a", "b"]}, 2)[1]
        {'x': tensor([2, 3]), 'name': 'b'}
    """
    if isinstance(batch, dict):
        fields = dict(batch)
    elif isinstance(batch, list | tuple):
        fields = {str(i): v for i, v in enumerate(batch)}
    else:
        fields = {"batch": batch}
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for key, value in fields.items():
        per_sample = (
            isinstance(value, torch.Tensor) and value.dim() > 0 or isinstance(value, list | tuple)
        ) and len(value) == n
        for i in range(n):
            out[i][key] = value[i] if per_sample else value
    return out


def _short(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        if value.numel() == 1:
            v = value.item()
            return f"{v:.4g}" if isinstance(v, float) else str(v)
        if value.dim() == 1 and value.numel() <= 4:
            return "[" + ", ".join(f"{v:.3g}" for v in value.tolist()) + "]"
        dtype = str(value.dtype).removeprefix("torch.")
        return f"{tuple(value.shape)} {dtype}"
    text = repr(value)
    return text if len(text) <= 24 else text[:21] + "..."


def _image_key(samples: list[dict[str, Any]]) -> str | None:
    for key, value in samples[0].items():
        if (
            isinstance(value, torch.Tensor)
            and value.is_floating_point()
            or (isinstance(value, torch.Tensor) and value.dtype == torch.uint8)
        ):
            shape = tuple(value.shape)
            if len(shape) == 3 and shape[0] in (1, 3):
                shape = shape[1:]
            if len(shape) == 2 and min(shape) >= 4:
                return str(key)
    return None


def _as_image(t: torch.Tensor, lo: float, hi: float) -> np.ndarray:
    a = t.detach().float().cpu()
    if a.dim() == 3:
        a = a[0] if a.shape[0] == 1 else a.permute(1, 2, 0)
    return ((a - lo) / (hi - lo if hi > lo else 1.0)).clamp(0, 1).numpy()


def replay_report(
    replayed: ReplayedBatch, *, decode: Callable[[list[int]], str] | None = None
) -> ReplayReport:
    """Split a replayed batch into its samples and choose how to show them.

    Args:
        replayed (ReplayedBatch): what :func:`clorch_nb.data.replay` returned.
        decode (Callable[[list[int]], str] | None): turns one sample's token ids into text;
            with it, the first integer ``(B, L)`` field is shown as text.

    Returns:
        ReplayReport: the samples, their dataset indices and seed, and their images or texts.

    Example:
        >>> import torch
        >>> from clorch_nb import data
        >>> ds = data.tensor_dataset(torch.zeros(6, 2), torch.arange(6))
        >>> loader = data.dataloader(ds, batch_size=3, shuffle=False)
        >>> report = replay_report(data.replay(loader, epoch=0, batch=1))
        >>> report.kind, [r.index for r in report.rows]
        ('table', [3, 4, 5])
    """
    n = len(replayed.indices)
    samples = split_batch(replayed.batch, n)
    kind: Kind = "table"
    key: str | None = None
    images: list[np.ndarray] = []
    texts: list[str] = []
    if n:
        key = _image_key(samples)
        if key is not None:
            kind = "images"
            stack = torch.stack([s[key].float() for s in samples])
            lo, hi = float(stack.min()), float(stack.max())
            images = [_as_image(s[key], lo, hi) for s in samples]
        else:
            key = _text_key(samples, decode)
            if key is not None:
                kind = "text"
                texts = [_as_text(s[key], decode) for s in samples]
    where: list[ShardItem | None] = [None] * n
    if replayed.shard_items is not None:
        where = list(replayed.shard_items)
    rows = [
        SampleRow(
            i, replayed.indices[i], replayed.seed, {k: _short(v) for k, v in s.items()}, where[i]
        )
        for i, s in enumerate(samples)
    ]
    return ReplayReport(str(replayed.ref), replayed.seed, kind, key, rows, images, texts)


def _text_key(samples: list[dict[str, Any]], decode: Any) -> str | None:
    for key, value in samples[0].items():
        if isinstance(value, str):
            return str(key)
        if (
            decode is not None
            and isinstance(value, torch.Tensor)
            and value.dim() == 1
            and not value.is_floating_point()
        ):
            return str(key)
    return None


def _as_text(value: Any, decode: Any) -> str:
    if isinstance(value, str):
        return value
    return str(decode([int(t) for t in value.tolist()]))
