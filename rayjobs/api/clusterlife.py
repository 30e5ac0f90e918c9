"""A cluster's life on the laptop (``rayjobs up | connect | down``): SkyPilot launches and tears it
down, an SSH tunnel reaches it, the laptop remembers it. The command line only words what these return."""

from __future__ import annotations

from typing import Any, Optional, Sequence


def cluster_name(name: Optional[str] = None) -> str:
    """The SkyPilot cluster a command means: ``name`` (``-c NAME``, ``connect NAME``) > the settings'
    ``cluster.name`` (which falls back to the remembered cluster, then ``rayjobs``).

    Raises:
        ConfigError: a settings file or variable is wrong (one line).
    """
    from rayjobs.provision import clusterdir

    return clusterdir.cluster_name(name)


def cluster_up(*, name: Optional[str] = None, params: Sequence[str] = ()) -> dict[str, Any]:
    """Launch (or re-bootstrap) the cluster, wait until it is complete, start its idle sentinel and
    connect to it (progress on stderr).

    Args:
        name: the SkyPilot cluster (None: :func:`cluster_name`'s).
        params: ``KEY=VALUE`` words (``num_nodes=2``, ``accelerators=H100:1``, ...); the settings fill
            in the rest.

    Returns:
        The remembered cluster's record (its name, local dashboard address, tunnel).

    Raises:
        ConfigError: a bad ``KEY=VALUE`` or setting. ClusterError: SkyPilot, the bootstrap or the
            tunnel failed (one line: what, and what to run).
    """
    from rayjobs.provision import skypilot

    return skypilot.up(cluster_name(name), skypilot.parse_params(list(params)))


def connect_cluster(*, name: Optional[str] = None, port: Optional[int] = None) -> dict[str, Any]:
    """Open (or reuse) the SSH tunnel to the cluster's Jobs API and remember the cluster.

    Args:
        name: the SkyPilot cluster (None: :func:`cluster_name`'s). port: the local port (None:
            8265, else a free one).

    Returns:
        The remembered cluster's record; ``address`` is the local dashboard URL.

    Raises:
        ClusterError: no SSH entry for it, the head is not ready, or the tunnel does not come up.
    """
    from rayjobs.provision import tunnel

    return tunnel.connect(cluster_name(name), port=port)


def disconnect_cluster() -> bool:
    """Close the tunnel and forget the remembered cluster; False if there was no open tunnel."""
    from rayjobs.provision import tunnel

    return tunnel.disconnect()


def cluster_down(name: str) -> None:
    """Close the tunnel, forget the cluster and tear it down with SkyPilot (its storage bucket or
    volume is kept; running jobs are lost: keep their history first, ``list_jobs(keep=True)``).

    Raises:
        ClusterError: SkyPilot failed (one line).
    """
    from rayjobs.provision import skypilot

    skypilot.down(name)


def base_image_note() -> str:
    """What ``rayjobs config`` says beside ``bootstrap/cluster.yaml``'s image: a base only, over which
    the nodes' setup installs the pinned verl, vLLM and torch; ``""`` without that file."""
    from rayjobs.provision import skypilot

    return skypilot.base_image_note()
