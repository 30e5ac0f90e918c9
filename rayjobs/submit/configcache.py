"""Plain (dict/list) copies of composed configs, made fast for sweeps.

OmegaConf walks verl's ~3500 nodes in ~15 ms per conversion and re-parses every interpolation on
access; a 50-point sweep needs the unresolved and the resolved form of every point. Here each is
made once per config object, and a sweep point's forms are derived from the base point's when
only plain leaves differ. Shared and read-only: callers must not change what these return.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Optional, Sequence


# =========================================================================== resolving points fast
# --------------------------------------------------------------------------- unresolved
# The unresolved config as plain dicts/lists, once per config object: the config hash, the
# preflight and the ledger all need it, and OmegaConf.to_container walks verl's ~3500 nodes in
# ~15 ms. Shared and read-only: callers must not change what raw() returns.
_RAW: dict[int, tuple[Any, dict]] = {}


def raw(cfg: Any) -> dict:
    """``OmegaConf.to_container(cfg, resolve=False)``, computed once per (read-only) config."""
    hit = _RAW.get(id(cfg))
    if hit is not None and hit[0] is cfg:
        return hit[1]
    from omegaconf import OmegaConf

    d = OmegaConf.to_container(cfg, resolve=False)
    remember_raw(cfg, d)
    return d


def remember_raw(cfg: Any, d: dict) -> None:
    """Record ``d`` as ``raw(cfg)`` (the launcher derives a sweep point's from the base's)."""
    if len(_RAW) > 1024:
        _RAW.clear()
    _RAW[id(cfg)] = (cfg, d)


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
    hit = _PLAIN.get(id(cfg))
    if hit is not None and hit[0] is cfg:
        return hit[1]
    return resolve_points([cfg])[0]


def resolve_points(cfgs: Sequence[Any]) -> list[dict]:
    """Resolved plain dicts of a sweep's points, resolving the full tree once.

    A point whose unresolved tree differs from the first point's only in leaves that no
    interpolation reads (see :func:`_read_by_interp`) is the first
    point's resolved tree with those leaves replaced; any other point is resolved in full.
    """
    from omegaconf import OmegaConf

    from rayjobs.submit import compose

    out: list[dict] = []
    with compose.memo_interpolations():
        raws = [raw(c) for c in cfgs]
        first = OmegaConf.to_container(cfgs[0], resolve=True, throw_on_missing=False)
        refs = _interp_refs(raws[0], (set(), set()))
        for c, r in zip(cfgs, raws):
            diff = _leaf_diff(raws[0], r) if out else []
            if diff is None or any(isinstance(v, (str, list)) and "${" in json.dumps(v, default=str) or _read_by_interp(p, refs)
                                   for p, v in diff):
                d = OmegaConf.to_container(c, resolve=True, throw_on_missing=False)
            elif not diff:
                d = first
            else:  # shares all but the changed paths with `first` (plain dicts are read-only here)
                d = with_leaves(first, diff)
            if len(_PLAIN) > 512:
                _PLAIN.clear()
            _PLAIN[id(c)] = (c, d)
            out.append(d)
    return out
