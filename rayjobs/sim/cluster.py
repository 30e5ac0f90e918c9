"""The simulated cluster: nodes of GPUs (and 3 CPUs a GPU, verl's bundles), what each job holds
where. Placement is :func:`rayjobs.contract.capacity.fit`'s (each group on one node, best fit),
the same the queue checks against; what is free is handed to the rules as
:class:`~rayjobs.contract.capacity.Node` rows, as the queue reads them from Ray."""

from __future__ import annotations

from typing import Optional, Sequence

from rayjobs.contract import capacity

CPUS_PER_GPU = capacity.CPUS_PER_GPU


class Cluster:
    """``nodes`` nodes of ``gpus_per_node`` GPUs."""

    def __init__(self, nodes: int = 16, gpus_per_node: int = 8) -> None:
        self.ids = [f"n{i:02d}" for i in range(nodes)]
        self.size = gpus_per_node
        self.free = {n: gpus_per_node for n in self.ids}
        self.held: dict[str, dict[str, int]] = {}  #: job -> node -> GPUs
        self.version = 0  #: bumped on every change (a view is built once per change)
        self._view: tuple[int, tuple[capacity.Node, ...]] = (-1, ())

    @property
    def gpus(self) -> int:
        return self.size * len(self.ids)

    @property
    def used(self) -> int:
        return self.gpus - sum(self.free.values())

    def view(self) -> tuple[capacity.Node, ...]:
        """What is free per node, as the queue's rules read it."""
        if self._view[0] != self.version:
            g, c = float(self.size), float(self.size * CPUS_PER_GPU)
            self._view = (self.version, tuple(capacity.Node(n, g, c, float(f), float(f * CPUS_PER_GPU))
                                             for n, f in self.free.items()))
        return self._view[1]

    def fit(self, groups: Sequence[int], free: Optional[dict[str, int]] = None) -> Optional[list[str]]:
        """A node per group where ``groups`` fit now (or on ``free``), best fit; None if they do not."""
        free = self.free if free is None else free
        if sum(groups) > sum(free.values()):
            return None
        got = capacity.pack(list(groups), {n: (f, f * CPUS_PER_GPU) for n, f in free.items()})
        return got

    def take(self, job_id: str, node: str, gpus: int) -> None:
        if self.free[node] < gpus:
            raise RuntimeError(f"{job_id}: {gpus} GPUs on {node}, which has {self.free[node]} free")
        self.free[node] -= gpus
        mine = self.held.setdefault(job_id, {})
        mine[node] = mine.get(node, 0) + gpus
        self.version += 1

    def place(self, job_id: str, groups: Sequence[int], where: Sequence[str]) -> None:
        for g, n in zip(groups, where):
            self.take(job_id, n, g)

    def release(self, job_id: str) -> int:
        """Free what ``job_id`` holds; the GPUs freed."""
        mine = self.held.pop(job_id, {})
        for n, g in mine.items():
            self.free[n] += g
        if mine:
            self.version += 1
        return sum(mine.values())

    def holds(self, job_id: str) -> int:
        return sum(self.held.get(job_id, {}).values())

    def holdings(self, job_id: str) -> dict[str, list[float]]:
        """Per node, ``[gpus, cpus]`` the job holds (the queue's ``ClusterView.holdings`` of it)."""
        return {n: [float(g), float(g * CPUS_PER_GPU)] for n, g in self.held.get(job_id, {}).items()}
