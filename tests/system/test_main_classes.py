"""Items whose classes are defined in a script's ``__main__`` (a namedtuple, a dataclass) come
back from process workers as the script's own classes, on both fronts, as from torch's
``DataLoader`` with spawned workers (the oracle, in the same script). The second fresh-user trial
of 2026-12-06 got "PicklingError: Can't pickle <class '__main__.Pair'>: it's not the same object
as __main__.Pair" where torch's loader worked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

SCRIPT = textwrap.dedent(
    """
    import collections, dataclasses, json, torch
    from clorch_nb import data

    Pair = collections.namedtuple("Pair", "a b")

    @dataclasses.dataclass
    class Rec:
        x: torch.Tensor
        y: int

    class DS(torch.utils.data.Dataset):
        def __init__(self, kind): self.kind = kind
        def __len__(self): return 6
        def __getitem__(self, i):
            if self.kind == "namedtuple":
                return Pair(torch.tensor(i), torch.full((2,), float(i)))
            return {"rec": Rec(torch.tensor([i]), i)}  # a dataclass inside a dict

    def first(items):
        return items[0]

    def seen(loader):
        out = []
        for b in loader:
            if isinstance(b, Pair):
                out.append(["Pair", b.a.tolist(), b.b.tolist()])
            else:
                out.append([type(b["rec"]).__name__, isinstance(b["rec"], Rec)])
        return out

    if __name__ == "__main__":
        got = {}
        for kind in ("namedtuple", "dataclass"):
            # torch's collate has no rule for a dataclass: each batch is its first item
            kw = {} if kind == "namedtuple" else {"collate_fn": first}
            got[kind] = {
                "torch": seen(torch.utils.data.DataLoader(
                    DS(kind), batch_size=2, num_workers=2, multiprocessing_context="spawn",
                    **kw)),
                "DataLoader": seen(data.DataLoader(DS(kind), batch_size=2, num_workers=2, **kw)),
                "dataloader": seen(data.dataloader(DS(kind), batch_size=2, shuffle=False,
                                                   num_workers=2, worker_backend="process",
                                                   **kw)),
            }
        print(json.dumps(got))
    """
)


def _run_script(script: Path, text: str) -> Any:
    """Run ``text`` as the script ``script`` (its own ``__main__``); the JSON it prints last."""
    script.write_text(text)
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=200,
        cwd=script.parent, env={**os.environ, "PYTHONPATH": str(repo)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(240)
def test_main_classes_come_back_as_the_scripts_own(tmp_path: Path) -> None:
    got = _run_script(tmp_path / "main_classes.py", SCRIPT)
    for kind, fronts in got.items():
        assert fronts["DataLoader"] == fronts["torch"], (kind, fronts)
        assert fronts["dataloader"] == fronts["torch"], (kind, fronts)
    assert got["namedtuple"]["torch"][0] == ["Pair", [0, 1], [[0.0, 0.0], [1.0, 1.0]]]
    assert got["dataclass"]["torch"][0] == ["Rec", True]


STATE_SCRIPT = textwrap.dedent(
    """
    import json, torch
    from clorch_nb import data

    SCALE = 1

    class Base:
        K = 0

    class DS(Base, torch.utils.data.Dataset):
        def __len__(self): return 2
        def __getitem__(self, i): return torch.tensor(i * SCALE + type(self).K)

    if __name__ == "__main__":
        loaders = {
            "torch": lambda: torch.utils.data.DataLoader(
                DS(), batch_size=2, num_workers=1, multiprocessing_context="fork"),
            "DataLoader": lambda: data.DataLoader(DS(), batch_size=2, num_workers=1),
            "dataloader": lambda: data.dataloader(DS(), batch_size=2, num_workers=1,
                                                  worker_backend="process", shuffle=False),
        }
        made = {name: make() for name, make in loaders.items()}  # workers start now
        got = {name: [] for name in loaders}
        for scale, k in ((10, 5), (3, 1)):  # set after the loaders were made, then again
            SCALE, Base.K = scale, k
            for name, loader in made.items():
                got[name].append(next(iter(loader)).tolist())
        print(json.dumps(got))
    """
)


@pytest.mark.timeout(240)
def test_main_globals_and_class_attributes_set_later_reach_the_workers(tmp_path: Path) -> None:
    """B96 in ``__main__``: a script's global and a class attribute of its base class, set after
    the loader was made (its process workers start then) and set again between epochs, are
    read by every epoch's workers on both fronts, as by torch's fork workers:
    ``[[5, 15], [1, 4]]``. Failed on ``05e145d`` with ``[[0, 1], ...]``: cloudpickle sent them
    by value as they were when the workers started."""
    got = _run_script(tmp_path / "main_state.py", STATE_SCRIPT)
    assert got["torch"] == [[5, 15], [1, 4]]
    assert got["DataLoader"] == got["torch"] and got["dataloader"] == got["torch"], got
