"""Typed facts beyond the contract's named fields: what a rank or a startup's capacity also showed.

The JSON contract carries them as an ``extras`` object per rank and per capacity, in the order the log
taught them (the startup's lines first, then what the engine's finish step derived): scripts diff two
reports line by line, so that order is part of the output. A frozen dataclass per engine would lose
it, so the values stay in one ordered store (``Rank.extras`` / ``Capacity.extras``, which only the
serialiser and the event router touch by key) and each engine reads and writes them through a
*view* that declares every fact's name, type and meaning: ``VllmRankFacts(rank).available_kv_gib``
is a ``float | None`` to mypy, a misspelt fact is an AttributeError rather than a silently empty
key, and ``tests/architecture/test_facts.py`` checks that every key a report carries is declared.

The views here hold what any engine may show (the phases every engine shares: a draft model,
graph capture, a second pool, caps that bind); each engine's ``facts.py`` adds its own.
"""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar, overload

T = TypeVar("T")


class HasFacts(Protocol):
    """A holder of a fact store: a ledger rank or capacity, a live server's capacity, a scrape reading."""

    extras: dict[str, Any]


class Fact(Generic[T]):
    """One declared fact: its attribute name is its key in the store (and in the JSON ``extras``).
    Reading an absent fact gives None; ``del`` removes it (a scratch value folded into another)."""

    __slots__ = ("name", "doc")

    def __init__(self, doc: str = "") -> None:
        self.doc = doc
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Fact[T]: ...

    @overload
    def __get__(self, obj: Facts, owner: type | None = None) -> T | None: ...

    def __get__(self, obj: Facts | None, owner: type | None = None) -> Fact[T] | T | None:
        if obj is None:
            return self
        return obj._store.get(self.name)

    def __set__(self, obj: Facts, value: T | None) -> None:
        obj._store[self.name] = value

    def __delete__(self, obj: Facts) -> None:
        obj._store.pop(self.name, None)


class Facts:
    """A typed view over one holder's ordered store of facts (a rank's or a capacity's)."""

    __slots__ = ("_store",)
    # keys a shape names from the log's own words (a component, a buffer kind), as fnmatch patterns
    families: tuple[str, ...] = ()

    def __init__(self, holder: HasFacts) -> None:
        self._store: dict[str, Any] = holder.extras

    @classmethod
    def declared(cls) -> dict[str, Fact[Any]]:
        """Every fact this view declares, its bases' included (name → descriptor)."""
        out: dict[str, Fact[Any]] = {}
        for klass in reversed(cls.__mro__):
            out.update({k: v for k, v in vars(klass).items() if isinstance(v, Fact)})
        return out

    @classmethod
    def declares(cls, key: str) -> bool:
        """Whether ``key`` is one of this view's facts or of its families."""
        from fnmatch import fnmatchcase

        return key in cls.declared() or any(fnmatchcase(key, f) for c in cls.__mro__
                                            for f in getattr(c, "families", ()))

    def has(self, fact: Fact[Any]) -> bool:
        """Whether the fact was set at all (set to None counts: the log said so without a value)."""
        return fact.name in self._store

    # The store by key, for the two places whose keys are data: the event router (a shape's yield names
    # its facts) and the folds that turn per-line scratch into facts. Everything else uses the attributes.
    def names(self) -> list[str]:
        """The keys set so far, in the order they were set."""
        return list(self._store)

    def get(self, key: str) -> Any:
        return self._store.get(key)

    def put(self, key: str, value: Any, first: bool = False) -> None:
        """Set a fact a shape named; ``first``: keep a value already there (the first line wins)."""
        if first:
            self._store.setdefault(key, value)
        else:
            self._store[key] = value

    def take(self, key: str) -> Any:
        """Remove a scratch value and return it (None when absent)."""
        return self._store.pop(key, None)

    def fill_from(self, other: Facts) -> None:
        """Add the other holder's facts this one lacks (two reports of one startup merged)."""
        for key, value in other._store.items():
            self._store.setdefault(key, value)


class RankFacts(Facts):
    """What any engine's rank may show beyond the contract fields."""

    __slots__ = ()
    assumed: Fact[list[str]] = Fact("rank fields the user's --assume supplied (Rank.how says 'assumed')")
    seen_in: Fact[str] = Fact("a rank known only from serving lines: no startup figure of its own")
    # a draft model (speculative decoding) loads and sizes its own pool
    draft_pre_load_free_gib: Fact[float] = Fact("free GiB before the draft model loaded")
    draft_weights_gib: Fact[float] = Fact()
    avail_after_draft_weights_gib: Fact[float] = Fact()
    avail_after_draft_pool_gib: Fact[float] = Fact()
    draft_load_seconds: Fact[float] = Fact()
    draft_model_class: Fact[str] = Fact()
    # a hybrid sliding-window model's second pool
    swa_pool_gib: Fact[float] = Fact("the sliding-window pool's size, beside the full-attention one")
    # CUDA-graph capture, as the progress bar and the capture lines show it
    avail_before_graphs_gib: Fact[float] = Fact("free GiB when capture began")
    capture_max_bs: Fact[int] = Fact("the largest batch size captured so far")
    capture_batch_sizes: Fact[int] = Fact("how many batch sizes the capture covers")
    avail_during_capture_gib: Fact[float] = Fact("the least free GiB the capture progress showed")
    graphs: Fact[list[dict[str, Any]]] = Fact("one entry per capture (graph GiB, free after, batch sizes)")
    avail_after_graphs_gib: Fact[float] = Fact()
    derivation: Fact[str] = Fact("the engine's budget arithmetic for this rank, as text the reports show")
    # a second pool's own figures (``<pool>_<what>``: the pool a shape named)
    mamba_mamba_slots: Fact[int] = Fact("the Mamba state pool's request slots")
    host_host_gb: Fact[float] = Fact("a host-memory KV tier's size (GB as printed)")
    host_what: Fact[str] = Fact()

    def note_assumed(self, field_name: str) -> None:
        self._store.setdefault("assumed", []).append(field_name)


class CapacityFacts(Facts):
    """What any engine's capacity may show beyond the contract fields."""

    __slots__ = ()
    swa_tokens: Fact[int] = Fact("a hybrid model's sliding-window pool, in tokens")
    full_tokens: Fact[int] = Fact("a hybrid model's full-attention pool, in tokens")
    max_req_input_len: Fact[int] = Fact("the longest prompt the server accepts (the pool's limit per request)")
    max_total_tokens_cap: Fact[int] = Fact("a token cap that bound the pool below what the budget allowed")
    kv_tokens_budget_uncapped: Fact[list[int]] = Fact("[low, high] tokens the budget alone would give")
    derived: Fact[list[str]] = Fact("capacity fields kvscope computed rather than read")

    def mark_derived(self, field_name: str) -> None:
        self._store.setdefault("derived", []).append(field_name)
