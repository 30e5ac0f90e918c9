"""Which cluster a command talks to, and how (no I/O here: ``rayjobs.settings`` resolves it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Target:
    """A cluster's endpoints and token.

    ``address``: the Ray dashboard (Jobs API) URL (a door's URL when ``door``), or None for the embedded local head before it
    is started. ``api``: the rayjobs queue API's URL when it is known without asking the head
    (a tunnel's local port, the embedded head's record, ``$RAYJOBS_API_ADDRESS``); None: found
    from the head (:meth:`rayjobs.client.dashboard.Dashboard.queue`).
    """

    address: Optional[str]
    source: str  #: where the address came from (for messages)
    token: Optional[str] = None  #: the cluster's auth token (a bearer header), never logged
    api: Optional[str] = None
    #: a team's door (``rayjobs login``): ``address`` and ``api`` are the door's URL, ``token`` the
    #: user's, and this the door certificate's pinned fingerprint (None: a loopback http door)
    fingerprint: Optional[str] = None
    door: bool = False

    def __repr__(self) -> str:  # never the token
        return f"Target(address={self.address!r}, source={self.source!r}, api={self.api!r}, door={self.door})"

    @property
    def embedded(self) -> bool:
        return self.address is None

    @property
    def key(self) -> str:
        """Which cluster this is, for the local record: the embedded head keeps its identity
        across restarts on another port; any other cluster is its address."""
        return "embedded" if self.source == "embedded" else str(self.address)
