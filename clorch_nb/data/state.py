"""A loader's position as small plain data: what ``state_dict()`` returns and
``load_state_dict()`` accepts, checked against the loader it is loaded into.

The state (JSON-serialisable, well under 1 KB, no tensors):

* ``epoch``: the loader epoch to continue (0 for the first ``iter()``);
* ``batches_done``: batches of that epoch already delivered (0: start of the epoch);
* ``also_done``: batch positions past ``batches_done`` that were delivered too (an
  ``in_order=False`` loader hands over whichever batch is ready first); they are not built again;
* ``seed``: the loader's seed; every epoch's order and every batch's RNG seed derive from it;
  ``seed_epoch``: the epoch it was drawn at (0; torch's front without ``seed=`` draws a seed at
  each epoch's ``iter()``, as torch does; -1: the epoch had not started, its seed is drawn at
  the resumed ``iter()``); ``generator``: then, the state of the user's
  ``generator=`` it is drawn from (hex), restored on load so the later epochs draw what the
  saver's would (None: drawn from the global RNG, which is the user's to restore);
* ``size``, ``batch_size``, ``drop_last``, ``shuffle``, ``num_batches``: the configuration the
  position means something in, compared on load;
* ``sampler``: the :class:`~clorch_nb.data.sampling.distributed.DistributedSampler`'s own state (its
  epoch, the layout of that epoch and how many of this rank's indices were consumed), or None;
* ``order_rng``, ``order_digest``: for another sampler (torch's ``RandomSampler``...), the RNG
  state it draws the epoch's order from and a digest of the batches delivered, so the resumed
  order is the saver's or the resume is refused (:mod:`~clorch_nb.data.sampling.sampler_rng`); None
  without such a sampler;
* ``skipped``: the epoch's items skipped under ``max_failures`` (``[index, batch, error]``), or
  None (:mod:`~clorch_nb.data.skipping`);
* ``dataset``: what the dataset's items depend on beyond its size, as it reports it
  (:func:`~clorch_nb.data.datasets.protocols.state_key_of`: a mix's weights, seed and epoch size,
  and its sources' own), compared key by key on load; None for a dataset without the hook;
* ``iterable``: the loader's dataset is a torch ``IterableDataset`` (``size`` is then its
  ``len()``, or -1 without one); ``stream``: mid-epoch, its position, which is inside the
  workers' iterators: ``num_workers``, the epoch's torch ``base_seed``, ``next_worker`` (whose
  batch comes next), ``finished`` (workers whose iterator ended) and ``replicas`` (each worker's
  :func:`~clorch_nb.data.datasets.stream.replica_state` after its last delivered batch: the items
  it yielded and the dataset's or iterator's own ``state_dict()``, which may hold tensors).

Restoring costs no batch: the epoch's order is recomputed from the seed (``epoch`` draws, one
permutation per earlier epoch when shuffling; nothing is fetched or collated) and delivery starts
at batch ``batches_done``.

The loader's :meth:`~clorch_nb.data.DataLoader.state_dict` and
:meth:`~clorch_nb.data.DataLoader.load_state_dict` read and apply it; a
:class:`~clorch_nb.data.sampling.distributed.DistributedSampler` saves and restores its own part
(and its elastic rule).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from clorch_nb.errors import ConfigError

__all__ = ["FORMAT", "LoaderState", "check_same", "refuse"]

#: the ``format`` tag of a loader state (bumped if the meaning of a field changes)
FORMAT = "clorch_nb.loader/1"


def refuse(what: str, field: str, saved: Any, here: Any, fix: str) -> ConfigError:
    """The error for a state saved under another configuration, naming the difference."""
    return ConfigError(
        f"cannot load this {what} state: it was saved with {field}={saved!r} but this {what} has "
        f"{field}={here!r}; {fix}"
    )


def check_same(what: str, saved: dict[str, Any], here: dict[str, Any], fix: str) -> None:
    """Raise :func:`refuse` for the first key whose value differs between the two dicts."""
    for key, value in here.items():
        if saved.get(key) != value:
            raise refuse(what, key, saved.get(key), value, fix)


@dataclass(frozen=True, slots=True)
class LoaderState:
    """A loader's position (see the module docstring for each field).

    Example:
        >>> s = LoaderState(epoch=1, batches_done=2, seed=0, size=10, batch_size=2,
        ...                 drop_last=False, shuffle=True, num_batches=5, sampler=None)
        >>> LoaderState.from_dict(s.to_dict()) == s
        True
        >>> import json; len(json.dumps(s.to_dict())) < 1024
        True
    """

    epoch: int
    batches_done: int
    seed: int
    size: int
    batch_size: int
    drop_last: bool
    shuffle: bool
    num_batches: int
    sampler: dict[str, Any] | None
    order_rng: dict[str, str] | None = None
    order_digest: str | None = None
    skipped: list[list[Any]] | None = None
    also_done: tuple[int, ...] = ()
    iterable: bool = False
    stream: dict[str, Any] | None = None
    seed_epoch: int = 0
    dataset: dict[str, Any] | None = None
    generator: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data: ints, bools, strings and (for the sampler) a nested dict of those."""
        return {"format": FORMAT, **asdict(self), "also_done": list(self.also_done)}

    @classmethod
    def from_dict(cls, state: Any) -> LoaderState:
        """Parse what :meth:`to_dict` produced (e.g. after a JSON or ``torch.save`` round trip).

        Raises:
            ConfigError: not a dict, another format, or a missing or mistyped field.
        """
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise ConfigError(
                f"state={state!r:.80} is not a loader state (a dict with format={FORMAT!r}, as "
                "loader.state_dict() returns)"
            )
        fields: dict[str, Any] = {k: state.get(k) for k in cls.__dataclass_fields__}
        also = fields.pop("also_done") or []  # absent from states saved in order
        fields["iterable"] = bool(fields["iterable"])  # absent from states before streams
        fields["seed_epoch"] = fields["seed_epoch"] or 0  # absent from states before B87
        if not isinstance(also, list | tuple) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in also
        ):
            raise ConfigError(
                f"loader state field also_done={also!r:.60} should be a list of batch "
                "positions; was the state edited?"
            )
        kinds: dict[str, Any] = {
            "drop_last": bool,
            "shuffle": bool,
            "sampler": (dict, type(None)),
            "batch_size": (int, type(None)),  # None: a batch_sampler decides each batch
            "order_rng": (dict, type(None)),
            "order_digest": (str, type(None)),
            "skipped": (list, type(None)),
            "iterable": bool,
            "stream": (dict, type(None)),
            "dataset": (dict, type(None)),
            "generator": (str, type(None)),
        }
        for key, value in fields.items():
            want = kinds.get(key, int)
            if not isinstance(value, want) or (
                want in (int, kinds["batch_size"]) and isinstance(value, bool)
            ):
                raise ConfigError(
                    f"loader state field {key}={value!r} should be of type "
                    f"{_type_name(want)}; was the state edited?"
                )
        if not 0 <= fields["batches_done"] <= fields["num_batches"] or fields["epoch"] < 0:
            raise ConfigError(
                f"loader state has epoch={fields['epoch']}, batches_done={fields['batches_done']}"
                f" of num_batches={fields['num_batches']}: out of range; was the state edited?"
            )
        return cls(**fields, also_done=tuple(also))

    def check_matches(self, here: LoaderState, *, seed_fixed: bool) -> None:
        """Refuse this (saved) state if ``here`` (the loader loading it) differs in dataset size,
        batch size, drop_last, shuffle, a fixed seed or a setting the dataset records
        (``dataset``: a mix's weights...); the error names the field.

        ``seed_fixed=False`` (the loader was built without ``seed=``) adopts the saved seed.
        """
        fix = "build the loader with the same dataset and options as the one that saved it"
        if self.dataset != here.dataset:  # a mix's position means something only in its plan
            saved_key, here_key = self.dataset or {}, here.dataset or {}
            for key in {**saved_key, **here_key}:
                if saved_key.get(key) != here_key.get(key):
                    raise refuse("loader", key, saved_key.get(key), here_key.get(key), fix)
        for key in ("iterable", "size", "batch_size", "drop_last", "shuffle"):
            if getattr(self, key) != getattr(here, key):
                raise refuse("loader", key, getattr(self, key), getattr(here, key), fix)
        if seed_fixed and self.seed != here.seed:
            raise refuse(
                "loader",
                "seed",
                self.seed,
                here.seed,
                "pass the same seed=, or build the loader without seed= to adopt it",
            )
        if (self.sampler is None) != (here.sampler is None):
            raise refuse("loader", "sampler", _kind(self.sampler), _kind(here.sampler), fix)


def _type_name(want: Any) -> str:
    kinds = want if isinstance(want, tuple) else (want,)
    return " or ".join("None" if k is type(None) else k.__name__ for k in kinds)


def _kind(sampler_state: dict[str, Any] | None) -> str:
    return "none" if sampler_state is None else "DistributedSampler"
