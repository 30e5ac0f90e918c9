"""The one way a typed id, the start of one, or a sweep id becomes the job ids it names (the queue's
``after``, the laptop's commands, evaluations, the local record's lookups)."""

from __future__ import annotations

from typing import Iterable, Mapping, Optional, Sequence

from rayjobs.contract.names import did_you_mean


class NoMatch(LookupError):
    """Nothing matches (the message names the closest ids)."""


class Ambiguous(LookupError):
    """Several jobs match a prefix."""


def starting(token: str, names: Iterable[str]) -> list[str]:
    """The names ``token`` is (an exact name wins: just it) or starts, sorted."""
    names = set(names)
    return [token] if token in names else sorted(n for n in names if n.startswith(token))


def _ambiguous(token: str, hits: Sequence[str], what: str) -> Ambiguous:
    return Ambiguous(f"{token!r} matches {len(hits)} {what}s ({', '.join(hits[:4])}{', ...' if len(hits) > 4 else ''}); "
                     f"give more of the id")


def resolve(token: str, ids: Iterable[Optional[str]], sweeps: Optional[Mapping[str, Sequence[str]]] = None,
            *, what: str = "job") -> list[str]:
    """The job ids ``token`` names: an id (an exact id wins), the unique id it starts, or -- when
    ``sweeps`` is given (sweep id -> its points' ids) -- a sweep id, which stands for all its
    points (an exact sweep id, else the unique sweep id it starts when no other job's id does: a
    point's id starts with its sweep's).

    Empty ids (a plain ``ray.init()`` driver has none) are skipped.

    Raises:
        NoMatch: nothing matches (one line, the closest ids named).
        Ambiguous: several match.
    """
    known = sorted({i for i in ids if i})
    sweeps = dict(sweeps or {})
    if token in known:
        return [token]
    if token in sweeps:
        return sorted(sweeps[token])
    hits = starting(token, known)
    if len(hits) == 1:
        return hits
    swept = starting(token, sweeps)
    if len(swept) == 1 and set(hits) <= set(sweeps[swept[0]]):
        return sorted(sweeps[swept[0]])
    hits = hits or swept
    if not hits:
        raise NoMatch(f"no {what} matches {token!r}{did_you_mean(token, [*known, *sweeps])}; `rayjobs list` shows the ids")
    raise _ambiguous(token, hits, what)


def resolve_sweep(token: str, sweeps: Iterable[str]) -> str:
    """The sweep id ``token`` names among ``sweeps``: itself, or the one sweep id it starts.

    Raises:
        NoMatch: none (the closest named). Ambiguous: several.
    """
    names = {s for s in sweeps if s}
    hits = starting(token, names)
    if len(hits) == 1:
        return hits[0]
    if hits:
        raise _ambiguous(token, hits, "sweep")
    raise NoMatch(f"no sweep {token!r}{did_you_mean(token, names)}; `rayjobs list` shows sweep ids")


def resolve_one(token: str, ids: Iterable[Optional[str]], *, what: str = "job") -> str:
    """The one id ``token`` is or starts (:func:`resolve` without sweeps)."""
    return resolve(token, ids, what=what)[0]


def sweeps_of(metadata_by_id: Mapping[str, Mapping[str, str]]) -> dict[str, list[str]]:
    """Sweep id -> the ids of its points, from each job's metadata (``sweep``)."""
    out: dict[str, list[str]] = {}
    for job_id, meta in metadata_by_id.items():
        sweep = (meta or {}).get("sweep")
        if sweep:
            out.setdefault(str(sweep), []).append(job_id)
    return out
