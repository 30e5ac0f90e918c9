"""Plain (dict/list) copies of composed configs, made fast for sweeps.

OmegaConf walks verl's ~3500 nodes in ~15 ms per conversion and re-parses every interpolation on
access; a 50-point sweep needs the unresolved and the resolved form of every point. Here each is
made once per config object, and a sweep point's forms are derived from the base point's when
only plain leaves differ. Shared and read-only: callers must not change what these return.
:class:`SharedJson` and :func:`yaml_by_top_key` write such trees out encoding each shared subtree once.
"""

from __future__ import annotations

import json
import re
import weakref
from json.encoder import encode_basestring_ascii
from typing import Any, Callable, Iterable, Optional, Sequence


def _remember(cache: dict[int, tuple[Any, dict]], cfg: Any, d: dict) -> None:
    """``cache[id(cfg)] = d`` for as long as ``cfg`` lives (no cap: a 1,000-point sweep keeps its
    points alive anyway, and a cap that clears at N thrashes once a sweep has more than N)."""
    key = id(cfg)
    cache[key] = (weakref.ref(cfg, lambda _ref, key=key: cache.pop(key, None)), d)


def _cached(cache: dict[int, tuple[Any, dict]], cfg: Any) -> Optional[dict]:
    hit = cache.get(id(cfg))
    return hit[1] if hit is not None and hit[0]() is cfg else None


# =========================================================================== resolving points fast
# --------------------------------------------------------------------------- unresolved
# The unresolved config as plain dicts/lists, once per config object: the config hash, the
# preflight and the ledger all need it, and OmegaConf.to_container walks verl's ~3500 nodes in
# ~15 ms. Shared and read-only: callers must not change what raw() returns.
_RAW: dict[int, tuple[Any, dict]] = {}


def raw(cfg: Any) -> dict:
    """``OmegaConf.to_container(cfg, resolve=False)``, computed once per (read-only) config."""
    hit = _cached(_RAW, cfg)
    if hit is not None:
        return hit
    from omegaconf import OmegaConf

    d = OmegaConf.to_container(cfg, resolve=False)
    remember_raw(cfg, d)
    return d


def remember_raw(cfg: Any, d: dict) -> None:
    """Record ``d`` as ``raw(cfg)`` (the launcher derives a sweep point's from the base's)."""
    _remember(_RAW, cfg, d)


def with_leaves(base: dict, leaves: Iterable[tuple[Sequence[str], Any]]) -> dict:
    """``base`` with some leaves replaced, copying only the dicts on their paths (the rest is shared)."""
    out = dict(base)
    for path, value in leaves:
        node = out
        for k in path[:-1]:
            node[k] = dict(node[k])
            node = node[k]
        node[path[-1]] = value
    return out


def derive_raw(base_raw: dict, cfg: Any, keys: Iterable[str]) -> dict:
    """raw(cfg) for a config that differs from the one ``base_raw`` came from only at ``keys``."""
    from omegaconf import Container, OmegaConf

    leaves = []
    for key in keys:
        parent_key, _, leaf = key.rpartition(".")
        parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
        node = parent._get_node(leaf)
        leaves.append((key.split("."), OmegaConf.to_container(node, resolve=False) if isinstance(node, Container)
                       else node._value()))
    return with_leaves(base_raw, leaves)


# --------------------------------------------------------------------------- resolved
_REF = re.compile(r"(?<![\w.])(\.*)([A-Za-z_]\w*(?:\.\w+)*)")


def _interp_refs(raw: Any, refs: tuple[set[str], set[str]]) -> tuple[set[str], set[str]]:
    """What the ``${...}`` strings in ``raw`` may read: (absolute dotted names, names in relative refs).

    Over-approximates (resolver names and literal words count as names too): a false hit only
    costs one full resolve.
    """
    if isinstance(raw, dict):
        for v in raw.values():
            _interp_refs(v, refs)
    elif isinstance(raw, list):
        for v in raw:
            _interp_refs(v, refs)
    elif isinstance(raw, str) and "${" in raw:
        for dots, name in _REF.findall(raw):
            if dots:
                refs[1].update(name.split("."))
            else:
                refs[0].add(name)
    return refs


def _read_by_interp(path: tuple, refs: tuple[set[str], set[str]]) -> bool:
    """Might an interpolation read the leaf at ``path`` (itself, a parent or a child of it)?"""
    key = ".".join(str(k) for k in path)
    return (any(r == key or key.startswith(r + ".") or r.startswith(key + ".") for r in refs[0])
            or bool(set(map(str, path)) & refs[1]))


def _leaf_diff(a: Any, b: Any, path: tuple = ()) -> Optional[list[tuple[tuple, Any]]]:
    """Leaves where ``b`` differs from ``a`` (same shape), or None if the shapes differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return None
        out: list[tuple[tuple, Any]] = []
        for k in a:
            d = _leaf_diff(a[k], b[k], path + (k,))
            if d is None:
                return None
            out += d
        return out
    if isinstance(a, dict) or isinstance(b, dict):
        return None
    return [] if a == b else [(path, b)]


_PLAIN: dict[int, tuple[Any, dict]] = {}


def plain(cfg: Any) -> dict:
    """The resolved plain form of a composed config (cached per config object)."""
    if isinstance(cfg, dict):
        return cfg
    hit = _cached(_PLAIN, cfg)
    return hit if hit is not None else resolve_points([cfg])[0]


def remember_plain(cfg: Any, d: dict) -> None:
    """Record ``d`` as ``plain(cfg)`` (a sweep point's, derived from the base's)."""
    _remember(_PLAIN, cfg, d)


def resolve_points(cfgs: Sequence[Any]) -> list[dict]:
    """Resolved plain dicts of a sweep's points, resolving the full tree once.

    A point whose unresolved tree differs from the first point's only in leaves that no
    interpolation reads (see :func:`_read_by_interp`) is the first
    point's resolved tree with those leaves replaced; any other point is resolved in full.
    A config resolved before (preflight, then the dry-run report) is not resolved again.
    """
    from rayjobs.config import compose

    out: list[dict] = []
    refs: Optional[tuple[set[str], set[str]]] = None
    with compose.memo_interpolations():
        for c in cfgs:
            d = _cached(_PLAIN, c)
            if d is None:
                if out and refs is None:
                    refs = _interp_refs(raw(cfgs[0]), (set(), set()))
                d = _resolve_like(c, cfgs[0], out[0], refs) if out else _resolve(c)
                remember_plain(c, d)
            out.append(d)
    return out


def _resolve(cfg: Any) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)


def _resolve_like(c: Any, first: Any, first_plain: dict, refs: Any) -> dict:
    """``c`` resolved: ``first``'s resolved tree with the leaves where ``c`` differs, where nothing reads those."""
    diff = _leaf_diff(raw(first), raw(c))
    if diff is None or any(isinstance(v, (str, list)) and "${" in json.dumps(v, default=str) or _read_by_interp(p, refs)
                           for p, v in diff):
        return _resolve(c)
    # shares all but the changed paths with `first` (plain dicts are read-only here)
    return with_leaves(first_plain, diff) if diff else first_plain


# =========================================================================== writing points fast
def _float(o: float) -> str:
    # as json's encoder writes floats (allow_nan)
    if o != o:
        return "NaN"
    if o in (float("inf"), float("-inf")):
        return "Infinity" if o > 0 else "-Infinity"
    return float.__repr__(o)


def _key(k: Any) -> str:
    """A mapping key as json writes it (str, float, bool, None, int; anything else is json's TypeError)."""
    if isinstance(k, str):
        return k
    if isinstance(k, float):
        return _float(k)
    if k is True or k is False or k is None:
        return {True: "true", False: "false", None: "null"}[k]
    if isinstance(k, int):
        return int.__repr__(k)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(k).__name__}")


class SharedJson:
    """``json.dumps(obj, indent=indent, sort_keys=sort_keys, default=str)`` of trees that share
    subtrees with one tree (sweep points made by :func:`with_leaves`): those are encoded once.

    A 1,000-point dry run prints ~45 KB of config per point, and json's indenting encoder is pure
    Python; a point's config hash encodes its whole tree. Only the subtrees of ``shared`` (at the
    same depth) are remembered, so memory stays one tree's text whatever the number of points.
    """

    def __init__(self, shared: Any, *, indent: Optional[int] = None, sort_keys: bool = False, level: int = 0):
        self._indent = None if indent is None else " " * indent
        self._sort = sort_keys
        self._memo: dict[int, tuple[Any, int, str]] = {}
        self._encode(shared, level, True)

    def dumps(self, obj: Any) -> str:
        """``obj`` as ``json.dumps`` writes it."""
        return self._encode(obj, 0, False)

    def _encode(self, o: Any, level: int, store: bool) -> str:
        if isinstance(o, str):
            return encode_basestring_ascii(o)
        if o is None or o is True or o is False:
            return "null" if o is None else "true" if o else "false"
        if isinstance(o, int):
            return int.__repr__(o)
        if isinstance(o, float):
            return _float(o)
        if not isinstance(o, (list, tuple, dict)):
            return self._encode(str(o), level, store)  # default=str
        hit = self._memo.get(id(o))
        if hit is not None and hit[0] is o and hit[1] == level:
            return hit[2]
        if isinstance(o, dict):
            pairs = sorted(o.items()) if self._sort else o.items()
            items = [encode_basestring_ascii(_key(k)) + ": " + self._encode(v, level + 1, store) for k, v in pairs]
        else:
            items = [self._encode(v, level + 1, store) for v in o]
        open_, close = ("{", "}") if isinstance(o, dict) else ("[", "]")
        if not items:
            text = open_ + close
        elif self._indent is None:
            text = open_ + ", ".join(items) + close
        else:
            inner = "\n" + self._indent * (level + 1)
            text = open_ + inner + ("," + inner).join(items) + "\n" + self._indent * level + close
        if store:
            self._memo[id(o)] = (o, level, text)  # (o kept: its id cannot be reused meanwhile)
        return text


def yaml_by_top_key(data: dict, shared: dict, memo: dict[Any, str], dump: Callable[[Any], str]) -> str:
    """``dump(data)`` for a mapping written in block style, as its top-level entries one by one:
    an entry whose value is ``shared``'s very object is dumped once (into ``memo``) for every point."""
    if not data:
        return dump(data)
    parts = []
    for k, v in data.items():
        if k in shared and shared[k] is v:
            text = memo.get(k)
            if text is None:
                text = memo[k] = dump({k: v})
        else:
            text = dump({k: v})
        parts.append(text)
    return "".join(parts)
