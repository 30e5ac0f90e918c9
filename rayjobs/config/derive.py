"""Sweep points derived from the sweep's first point, without a config tree of their own.

A 1,000-point sweep of ``trainer.total_epochs`` differs from point to point in one leaf of verl's
~3500-node tree. A point that only sets plain leaves that nothing reads through an interpolation
(not ``rayjobs.*``, no new interpolation, no list or mapping) is a :class:`Derived` point: its
value is checked on a scratch copy of the base (Hydra's own validation and conversion), its plain
forms are the base's with those leaves replaced (:func:`~rayjobs.config.configcache.with_leaves`),
and what its JobSpec reads is the base's, read once (:class:`Values`), but for those leaves. Its
DictConfig is built (as any other point's) only if something asks for ``.cfg``. Every other point
keeps a full tree of its own.
"""

from __future__ import annotations

import json
import pickle
from typing import Any, Callable, Mapping, Optional, Sequence

from rayjobs.config import compose, configcache
from rayjobs.config.compose import Composed

_NO = object()


def _same(v: Any) -> Any:
    return v


def _overlap(key: str, leaf: str) -> bool:
    return key == leaf or leaf.startswith(key + ".") or key.startswith(leaf + ".")


class Values:
    """What a JobSpec reads of one composed (read-only) config, each read done once."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self._memo: dict[Any, Any] = {}

    def read(self, tag: Any, keys: Sequence[str], fn: Callable[[Any], Any],
             on_leaf: Optional[Callable[[Any], Any]] = None) -> Any:
        """``fn(cfg)``, remembered under ``tag``.

        ``fn`` reads only ``keys`` (their subtrees, and what interpolations there read);
        ``on_leaf``, for a single key, is what ``fn`` gives when that key is a plain leaf of this value.
        """
        hit = self._memo.get(tag, _NO)
        if hit is _NO:
            hit = self._memo[tag] = fn(self.cfg)
        return hit

    def select(self, key: str, default: Any = None) -> Any:
        """``OmegaConf.select(cfg, key, default=default)``."""
        from omegaconf import OmegaConf

        return self.read(("select", key, default), (key,), lambda cfg: OmegaConf.select(cfg, key, default=default), _same)

    def value(self, key: str) -> Any:
        """The resolved value at ``key`` (None when absent or missing), lists and mappings as plain ones."""
        from omegaconf import DictConfig, ListConfig, OmegaConf

        def fn(cfg: Any) -> Any:
            node = OmegaConf.select(cfg, key, throw_on_missing=False)
            return OmegaConf.to_container(node, resolve=True) if isinstance(node, (DictConfig, ListConfig)) else node

        return self.read(("value", key), (key,), fn, _same)


class PointValues(Values):
    """A derived point's reads: its swept leaves, else the base's (nothing in the base reads those leaves)."""

    def __init__(self, base: Values, leaves: Mapping[str, Any], point: "Derived") -> None:
        self.base, self.leaves, self._point = base, leaves, point
        self._full: Optional[Values] = None

    @property
    def cfg(self) -> Any:  # type: ignore[override]
        return self._point.cfg

    def read(self, tag: Any, keys: Sequence[str], fn: Callable[[Any], Any],
             on_leaf: Optional[Callable[[Any], Any]] = None) -> Any:
        if on_leaf is not None and len(keys) == 1 and keys[0] in self.leaves:
            return on_leaf(self.leaves[keys[0]])
        if any(_overlap(k, leaf) for k in keys for leaf in self.leaves):  # reads around a leaf: the point's own tree
            if self._full is None:
                self._full = Values(self._point.cfg)
            return self._full.read(tag, keys, fn, on_leaf)
        return self.base.read(tag, keys, fn, on_leaf)


class Derived(Composed):
    """A sweep point made by :meth:`Deriver.derive`; ``cfg`` is built on first use (see the module doc)."""

    @classmethod
    def lazy(cls, deriver: "Deriver", overrides: Sequence[str], leaves: dict[str, Any], parsed: list[Any]) -> "Derived":
        """A point of ``deriver``'s base with ``leaves`` (dotted key -> value, checked) set by ``parsed``."""
        self = object.__new__(cls)  # Composed's fields but `cfg`, which __getattr__ makes when asked
        for name, value in (("experiment", deriver.base.experiment), ("overrides", tuple(overrides)),
                            ("preset", dict(deriver.base.preset)), ("deriver", deriver), ("leaves", leaves),
                            ("parsed", parsed), ("_forms", {})):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "values", PointValues(deriver.values, leaves, self))
        return self

    def __getattr__(self, name: str) -> Any:
        if name != "cfg" or "deriver" not in self.__dict__:
            raise AttributeError(name)
        cfg = self.deriver.materialize(self)
        object.__setattr__(self, "cfg", cfg)
        return cfg

    def _form(self, name: str, base: Callable[[], dict]) -> dict:
        d = self._forms.get(name)
        if d is None:
            d = self._forms[name] = configcache.with_leaves(base(), ((k.split("."), v) for k, v in self.leaves.items()))
        return d

    def raw(self) -> dict:
        """The unresolved plain config: the base's with the swept leaves."""
        return self._form("raw", lambda: self.deriver.raw)

    def plain(self) -> dict:
        """The resolved plain config: the base's with the swept leaves (nothing reads them)."""
        return self._form("plain", lambda: configcache.plain(self.deriver.base.cfg))


def _fast_value(v: Any) -> bool:
    """A value a derived point may take: a scalar, no interpolation, not ``???``."""
    return v is None or isinstance(v, (bool, int, float)) or isinstance(v, str) and "${" not in v and v != "???"


def _head(override: str) -> str:
    return override.split("=", 1)[0]


class Deriver:
    """A sweep's base point (its first, composed in full) and what the points derived from it share."""

    def __init__(self, base: Composed) -> None:
        self.base = base
        self.raw = configcache.raw(base.cfg)
        self.values = Values(base.cfg)
        self._heads = [_head(o) for o in base.overrides]
        self._blob: Optional[bytes] = None
        self._scratch: Any = None
        self._refs: Any = None
        self._plain: dict[tuple, bool] = {}
        self._fast: dict[str, bool] = {}
        self._json: Optional[configcache.SharedJson] = None
        self._yaml: dict[Any, str] = {}

    def copy(self) -> Any:
        """A private, writable copy of the base's config."""
        from omegaconf import OmegaConf

        # A pickle of the finished base config is the cheap way to a private copy of it:
        # unpickling rebuilds the node tree without re-validating ~1000 nodes (a few ms per
        # point, against ~50-100 ms for OmegaConf.create or a deepcopy on a 2-core machine).
        if self._blob is None:
            self._blob = pickle.dumps(self.base.cfg)
        cfg = pickle.loads(self._blob)
        OmegaConf.set_readonly(cfg, False)
        return cfg

    def plain(self, p: Any) -> bool:
        """A plain key=value override of a key the base config has (not a group choice, not a delete)."""
        from omegaconf import OmegaConf

        sig = (p.key_or_group, p.is_delete(), p.package)
        if sig not in self._plain:
            self._plain[sig] = not (p.is_delete() or p.package is not None or p.key_or_group.startswith("hydra")) \
                and OmegaConf.select(self.base.cfg, p.key_or_group, default="__absent__") != "__absent__"
        return self._plain[sig]

    def derive(self, overrides: Sequence[str], diff: Sequence[str], parsed: list[Any]) -> Composed:
        """The point with ``overrides``, ``diff`` (parsed: ``parsed``) being those the base has not; each
        :meth:`plain`. A :class:`Derived` point where it can be (see the module doc), else one of its own."""
        if [_head(o) for o in overrides] == self._heads and all(self._fast_key(p) and _fast_value(p.value())
                                                                for p in parsed):
            return self._lazy(overrides, diff, parsed)
        point = self._finish(self._updated(diff, parsed), overrides)
        # its plain copy, too, is the base's with the swept leaves set (no full walk)
        configcache.remember_raw(point.cfg, configcache.derive_raw(self.raw, point.cfg, [p.key_or_group for p in parsed]))
        return point

    def materialize(self, point: Derived) -> Any:
        """A derived point's own DictConfig, made as a point that is not derived is."""
        shared = set(self.base.overrides)
        diff = [o for o in point.overrides if o not in shared]
        cfg = self._finish(self._updated(diff, point.parsed), point.overrides).cfg
        configcache.remember_raw(cfg, point.raw())
        return cfg

    def _updated(self, diff: Sequence[str], parsed: list[Any], cfg: Any = None) -> Any:
        from omegaconf import OmegaConf

        cfg = self.copy() if cfg is None else cfg
        with compose.translate_errors(diff):
            for p in parsed:
                OmegaConf.update(cfg, p.key_or_group, p.value(), merge=False, force_add=p.is_add())
        return cfg

    def _finish(self, cfg: Any, overrides: Sequence[str]) -> Composed:
        from omegaconf import open_dict

        with open_dict(cfg):
            cfg["hydra"] = {"runtime": {"choices": {"exp": self.base.experiment}}}
        return compose.finish(cfg, overrides)

    def _lazy(self, overrides: Sequence[str], diff: Sequence[str], parsed: list[Any]) -> Derived:
        """Check the point's values as its own tree would, then make it without one.

        Hydra's validation and conversion run on one scratch copy of the base: only swept plain
        leaves ever change there, and only this point's own are read back.
        """
        if self._scratch is None:
            self._scratch = self.copy()
        self._updated(diff, parsed, self._scratch)
        leaves = {p.key_or_group: _node(self._scratch, p.key_or_group)._value() for p in parsed}
        # what finish() checks of a point that changes only these leaves (the rest is the base's, checked)
        compose.check_types(None, diff, value_of=leaves.get)
        compose.check_absolute(None, diff, value_of=leaves.get)
        return Derived.lazy(self, overrides, leaves, parsed)

    def _fast_key(self, p: Any) -> bool:
        key = p.key_or_group
        hit = self._fast.get(key)
        if hit is None:
            hit = self._fast[key] = self._plain_leaf(key)
        return hit

    def _plain_leaf(self, key: str) -> bool:
        """Is ``key`` a scalar leaf of the base, outside ``rayjobs``, that no interpolation reads?"""
        from omegaconf import ValueNode

        path = key.split(".")
        if path[0] in ("rayjobs", "hydra") or "[" in key:  # rayjobs.*: the spec's own keys, checked as a whole
            return False
        d: Any = self.raw
        for k in path[:-1]:
            d = d.get(k) if isinstance(d, dict) else None
        if not isinstance(d, dict) or path[-1] not in d or isinstance(d[path[-1]], (dict, list)):
            return False
        if not isinstance(_node(self.base.cfg, key), ValueNode):
            return False
        if self._refs is None:
            self._refs = configcache._interp_refs(self.raw, (set(), set()))
        return not configcache._read_by_interp(tuple(path), self._refs)

    def canonical_json(self, raw: dict) -> str:
        """``json.dumps(raw, sort_keys=True, default=str)`` of a point's raw config (shared subtrees once)."""
        if self._json is None:
            self._json = configcache.SharedJson(self.raw, sort_keys=True)
        return self._json.dumps(raw)

    def yaml(self, raw: dict, dump: Callable[[Any], str]) -> str:
        """``dump(raw)`` of a point's raw config, the base's top-level entries dumped once."""
        return configcache.yaml_by_top_key(raw, self.raw, self._yaml, dump)


def _node(cfg: Any, key: str) -> Any:
    """The node at dotted ``key``, unresolved (the key exists)."""
    node = cfg
    for k in key.split("."):
        node = node._get_node(k)
    return node


# --------------------------------------------------------------------------- any point, derived or not
def is_derived(c: Composed) -> bool:
    """Was ``c`` made by :meth:`Deriver.derive` without a tree of its own?"""
    return "deriver" in c.__dict__


def values_of(c: Composed) -> Values:
    """What a JobSpec reads of ``c``."""
    v = c.__dict__.get("values")
    return v if v is not None else Values(c.cfg)


def raw_of(c: Composed) -> dict:
    """``c``'s unresolved plain config (:func:`rayjobs.config.configcache.raw`)."""
    return c.raw() if isinstance(c, Derived) and is_derived(c) else configcache.raw(c.cfg)


def plain_configs(points: Sequence[Composed]) -> list[dict]:
    """The resolved plain configs of a submission's points; the full trees among them resolved once
    (:func:`rayjobs.config.configcache.resolve_points`)."""
    own = [i for i, c in enumerate(points) if not is_derived(c)]
    out: list[Any] = [None] * len(points)
    for i, d in zip(own, configcache.resolve_points([points[i].cfg for i in own]) if own else []):
        out[i] = d
    for i, c in enumerate(points):
        if out[i] is None:
            out[i] = c.plain()  # type: ignore[attr-defined]
    return out


def canonical_json(c: Composed) -> str:
    """``c``'s raw config as the config hash writes it: ``json.dumps(raw, sort_keys=True, default=str)``."""
    if isinstance(c, Derived) and is_derived(c):
        return c.deriver.canonical_json(c.raw())
    return json.dumps(configcache.raw(c.cfg), sort_keys=True, default=str)


def config_yaml(c: Composed, dump: Callable[[Any], str]) -> str:
    """``dump(raw)`` of ``c``'s raw config (what the ledger keeps)."""
    if isinstance(c, Derived) and is_derived(c):
        return c.deriver.yaml(c.raw(), dump)
    return dump(configcache.raw(c.cfg))
