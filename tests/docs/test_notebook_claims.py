"""Numbers the tutorials' prose states are the numbers their stored outputs show.

Each claim names a notebook, a pattern in its markdown (or the README) that captures the numbers
the text states, and a pattern in a stored output that captures the same numbers as the code
printed them. nbval keeps the outputs current; this test keeps the prose in step with them, so a
change to the data or the library that moves a number fails here instead of leaving the text
wrong.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests import notebook_files

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"


def _notebook(prefix: str) -> nbformat.NotebookNode:
    (path,) = NOTEBOOKS.glob(f"{prefix}_*.ipynb")
    return notebook_files.read(path)


def _markdown(prefix: str) -> str:
    if prefix == "README":
        return (ROOT / "README.md").read_text()
    nb = _notebook(prefix)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown").replace("\n", " ")


def _outputs(prefix: str) -> str:
    parts = []
    for cell in _notebook(prefix).cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.append("".join(out.get("data", {}).get("text/plain", "")))
    return "\n".join(parts)


def _numbers(text: str) -> list[float]:
    return [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*(?:\.\d+)?", text)]


def same(said: list[float], shown: list[float]) -> bool:
    return said == shown


# (id, where the text is, its pattern, where the output is, its pattern, how the numbers relate):
# the groups of each pattern capture numbers; the relation holds between the two lists
CLAIMS: list[tuple[str, str, str, str, str, Callable[[list[float], list[float]], bool]]] = [
    (
        "docs text size",
        "01",
        r"\(([\d,]+) characters, under the PSF",
        "00",
        r"text: (\d+) characters",
        same,
    ),
    ("digits count", "01", r"digits\*\*, ([\d,]+) greyscale", "01", r"X \((\d+), 1, 8, 8\)", same),
    (
        "batches of 32",
        "02",
        r"the last batch is short: (\d+) full batches of 32 plus one of (\d+)\.",
        "02",
        r"len\(loader\) = (\d+) batches.*?\n.*?last: (\d+)",
        lambda said, shown: [said[0] + 1, said[1]] == shown and said[0] * 32 + said[1] == 1797,
    ),
    (
        "batches of 500",
        "03",
        r"batch_size=500`: three full batches, then a short one of (\d+)\.",
        "03",
        r"PARTIAL: (\d+) of 500 items",
        lambda said, shown: said == shown and 3 * 500 + said[0] == 1797,
    ),
    (
        "padding share",
        "03",
        r"Padding wasted (\d+)% of the positions",
        "03",
        r"pads \((\d+)%\)",
        same,
    ),
    (
        "png size",
        "04",
        r"\(upscaled to (\d+)×(\d+)\)",
        "04",
        r"data \(50, 1, (\d+), (\d+)\)",
        same,
    ),
    (
        "899 per rank",
        "06",
        r"With (\d+) positions per rank",
        "06",
        r"items per rank \[(\d+), \d+\]",
        same,
    ),
    (
        "719 per rank",
        "06",
        r"one epoch's (\d+) positions per rank",
        "06",
        r"items per rank \[(\d+), \d+\], union covers 1437",
        same,
    ),
    (
        "test split",
        "07",
        r"hold out (\d+) of the ([\d,]+) digits",
        "07",
        r"test: +TensorDataset\(data=\((\d+), 1, 8, 8\)",
        lambda said, shown: said[0] == shown[0] and said[1] == 1797,
    ),
    (
        "torchrun shard",
        "09",
        r"Each rank read (\d+) of the ([\d,]+) digits",
        "09",
        r"rank 0 of 2, epoch 0: (\d+) items",
        lambda said, shown: said[0] == shown[0] == -(-said[1] // 2),
    ),
    (
        "elastic cut",
        "10",
        r"the first 6 x 32 x 2 = (\d+) positions were consumed",
        "10",
        r"positions read by the new ranks: (\d+) to",
        same,
    ),
    (
        "elastic rest",
        "10",
        r"the ([\d,]+) remaining digits divide evenly over 3 ranks",
        "10",
        r"after: 3 ranks x \[(\d+), \d+, \d+\] items",
        lambda said, shown: said[0] == 3 * shown[0] == 1797 - 384,
    ),
    (
        "lightning steps per rank",
        "19",
        r"Each rank took (\d+) steps per epoch and read (\d+) digits, ([\d,]+) reads in all",
        "19",
        r"full +rank 0: epoch 0: (\d+) steps, (\d+) items",
        lambda said, shown: said[:2] == shown and said[2] == 2 * said[1] == 1797 + 1,
    ),
    (
        "torch resume steps left",
        "19",
        r"restores its step counter \((\d+) of (\d+) done\).*? for the (\d+) steps left",
        "19",
        r"resumed +rank 0: epoch 0: (\d+) steps, 768 items",
        lambda said, shown: said[2] == shown[0] == said[1] - said[0],
    ),
    (
        "mix counts",
        "18",
        r"\*\*(\d+) clean and (\d+) jittered\*\*, every epoch",
        "18",
        r"items per epoch: \{'clean': (\d+), 'jittered': (\d+)\}",
        lambda said, shown: said == shown and sum(said) == 1797,
    ),
    (
        "mix elastic rest",
        "18",
        r"the other ([\d,]+) divide evenly over the 3 new ranks \((\d+) each",
        "18",
        r"after: \[(\d+), \d+, \d+\] on 3 ranks",
        lambda said, shown: said[1] == shown[0] and said[0] == 3 * shown[0] == 1797 - 384,
    ),
    (
        "mix jittered per batch",
        "18",
        r"within one item of its planned (\d+) jittered",
        "18",
        r"jittered per full batch of 32: (\d+) to (\d+) \((\d+) planned\)",
        lambda said, shown: (
            said[0] == shown[2] and said[0] - 1 <= shown[0] <= shown[1] <= said[0] + 1
        ),
    ),
    (
        "by-value shared size",
        "17",
        r"here, some \d+ KiB pickled per worker and ([\d.]+) MiB shared",
        "17",
        r"shared: ([\d.]+) MiB",
        same,
    ),
    (
        "README accuracy",
        "README",
        r"end to end \(about (\d+)% test accuracy\)",
        "07",
        r"final test accuracy: \d+/\d+ = ([\d.]+)%",
        lambda said, shown: abs(said[0] - shown[0]) < 1,
    ),
]


@pytest.mark.parametrize("claim", CLAIMS, ids=[c[0] for c in CLAIMS])
def test_prose_states_the_printed_numbers(claim: tuple[Any, ...]) -> None:
    name, text_nb, text_pattern, out_nb, out_pattern, relation = claim
    stated = re.search(text_pattern, _markdown(text_nb))
    assert stated, f"{name}: the text of {text_nb} no longer says {text_pattern!r}"
    printed = re.search(out_pattern, _outputs(out_nb))
    assert printed, f"{name}: no output of {out_nb} matches {out_pattern!r}"
    said = [n for g in stated.groups() for n in _numbers(g)]
    shown = [n for g in printed.groups() for n in _numbers(g)]
    assert relation(said, shown), f"{name}: the text says {said}, the output shows {shown}"
