"""From an address to a :class:`~rayjobs.client.dashboard.Dashboard`: the one way rayjobs connects.

The address comes by the precedence of :func:`rayjobs.settings.resolve_target`; when it is the
embedded local head, that head is started (or reused) first.
"""

from __future__ import annotations

from typing import Optional

from rayjobs import settings
from rayjobs.client.dashboard import Dashboard, DashboardDown, unreachable_message
from rayjobs.errors import ClusterUnreachable


def connect(address: Optional[str] = None, *, address_from: str = "--address", quiet: bool = True) -> Dashboard:
    """A client of the cluster at ``address`` (or the one the settings name), reachable and authorised.

    Args:
        address: a dashboard URL or ``host:port``; None for the settings' precedence.
        address_from: where ``address`` was set (``--address``, ``rayjobs.address``), for messages.
        quiet: do not say on stderr that the embedded local head is used.

    Returns:
        The :class:`Dashboard`, its dashboard known to answer (the Jobs SDK is made on first use).

    Raises:
        ClusterUnreachable: nothing answers there, or it refuses our token (one line, what to run).
    """
    target = settings.resolve_target(address, address_from)
    if target.embedded:
        from rayjobs.client import embedded

        target = embedded.ensure(quiet=quiet)
    d = Dashboard(target)
    # Connect now, so an unreachable cluster fails here in one line: one GET of /api/version (what
    # the SDK's constructor asks too), not the SDK itself, whose import is ~1 s of a `rayjobs list`.
    try:
        d.version()
    except DashboardDown as e:
        raise ClusterUnreachable(unreachable_message(target, e)) from e
    return d
