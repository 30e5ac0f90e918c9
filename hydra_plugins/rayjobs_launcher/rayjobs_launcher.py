"""Hydra launcher + sweeper for ``python -m rayjobs.submit -m ...``: one Ray job per sweep point.

The launcher *submits* and returns at once: each ``JobReturn`` is COMPLETED with the submission id
as its return value (a launcher that waited for RL runs to finish would be wrong here). Every
point is composed and checked before any is submitted, so one bad point submits nothing.

Composition is shared: the first point is composed by Hydra; a point that differs from it only in
plain key values is derived from it (:mod:`rayjobs.config.derive`): without a config tree of its
own where it only sets scalar leaves nothing else reads, else by applying those values to an
unpickled copy of the base (milliseconds, not a full compose).
Points that change a config group are composed in full. The ``rayjobs`` sweeper is Hydra's basic
sweeper minus its per-point pre-composition, which this launcher does itself.
"""



import pickle
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf


@dataclass
class RayjobsLauncherConf:
    _target_: str = "hydra_plugins.rayjobs_launcher.rayjobs_launcher.RayjobsLauncher"


@dataclass
class RayjobsSweeperConf(BasicSweeperConf):
    _target_: str = "hydra_plugins.rayjobs_launcher.rayjobs_launcher.RayjobsSweeper"


ConfigStore.instance().store(group="hydra/launcher", name="rayjobs", node=RayjobsLauncherConf, provider="rayjobs")
ConfigStore.instance().store(group="hydra/sweeper", name="rayjobs", node=RayjobsSweeperConf, provider="rayjobs")


class RayjobsSweeper(BasicSweeper):
    """Hydra's basic sweeper (same syntax, batches, cartesian products) without re-composing each point."""

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        # The rayjobs launcher composes and checks every point before submitting any.
        return None


class RayjobsLauncher(Launcher):
    """Submit every point of a sweep as its own Ray job; never wait for them."""

    def __init__(self) -> None:
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from rayjobs.config import compose
        from rayjobs.submit.app import run_points

        with compose.memo_interpolations():
            points = self.compose_points([list(o) for o in job_overrides])
            ids = run_points(points, sweep=True)
        returns = []
        for i, overrides in enumerate(job_overrides):
            r = JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)
            r.return_value = ids[i] if i < len(ids) else None
            returns.append(r)
        return returns

    # ------------------------------------------------------------------ shared composition
    def compose_points(self, batch: List[List[str]]) -> List[Any]:
        """Every point of ``batch`` composed and checked: the first in full, the others derived from
        it where they differ only in plain keys (:mod:`rayjobs.config.derive`)."""
        from rayjobs.config import compose
        from rayjobs.config.derive import Deriver

        assert self.config is not None and self.hydra_context is not None
        loader = self.hydra_context.config_loader
        parser = OverridesParser.create(config_loader=loader)
        base_overrides = batch[0]
        base = self._from_sweep_config(parser, base_overrides)
        if base is None:
            with compose.translate_errors(base_overrides):
                base_cfg = loader.load_sweep_config(self.config, list(base_overrides))
            base = compose.finish(base_cfg, base_overrides)
        deriver = Deriver(base)
        shared = set(base_overrides)
        parsed_once: dict[str, Any] = {}  # a grid repeats each value of an axis on many points
        out = [base]
        for overrides in batch[1:]:
            diff = [o for o in overrides if o not in shared]
            for o in diff:
                if o not in parsed_once:
                    parsed_once[o] = parser.parse_overrides([o])[0]
            parsed = [parsed_once[o] for o in diff]
            if all(deriver.plain(p) for p in parsed):
                out.append(deriver.derive(overrides, diff, parsed))
            else:  # a config group changes: compose this point in full
                with compose.translate_errors(overrides):
                    cfg = loader.load_sweep_config(self.config, list(overrides))
                out.append(compose.finish(cfg, overrides))
        return out

    def _from_sweep_config(self, parser: Any, overrides: List[str]) -> Optional[Any]:
        """The first point, derived from the config Hydra already composed for the sweep.

        That config has every override but the swept ones applied; when the first point's swept
        values are plain keys, setting them on a copy saves a second full composition.
        None when a swept override is anything else (a group, an addition, a deletion).
        """
        from rayjobs.config import compose

        assert self.config is not None
        typed = OmegaConf.select(self.config, "hydra.overrides.task", default=None)
        choices = OmegaConf.select(self.config, "hydra.runtime.choices", default=None)
        if typed is None or not choices or not choices.get("exp"):
            return None
        applied = set(typed)
        diff = [o for o in overrides if o not in applied]
        parsed = parser.parse_overrides(diff)
        if not all(self._plain(p, self.config) for p in parsed):
            return None
        cfg = pickle.loads(pickle.dumps(self.config))
        OmegaConf.set_readonly(cfg, False)
        with compose.translate_errors(diff):
            for p in parsed:
                OmegaConf.update(cfg, p.key_or_group, p.value(), merge=False, force_add=p.is_add())
        return compose.finish(cfg, overrides)

    @staticmethod
    def _plain(p: Any, cfg: DictConfig) -> bool:
        """A plain key=value override of a key the base config has (not a group choice, not a delete)."""
        if p.is_delete() or p.package is not None or p.key_or_group.startswith("hydra"):
            return False
        return OmegaConf.select(cfg, p.key_or_group, default="__absent__") != "__absent__"
