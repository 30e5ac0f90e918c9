"""The Python API: a notebook's way in, and what the ``rayjobs`` command line is a thin layer over.

Two nouns, as in submitit: experiments are *submitted* (or *planned*: the dry-run half), and each
submission is a :class:`Job` handle::

    import rayjobs

    job = rayjobs.submit_experiment("ppo_gsm8k_qwen05b", ["trainer.total_epochs=1"])
    job.status()            # 'QUEUED', 'RUNNING', ...
    job.wait(timeout=3600)  # 'SUCCEEDED'
    points = rayjobs.submit_sweep("grpo_7b", ["algorithm.kl_ctrl.kl_coef=0.001,0.01"])

Every function takes keyword-only options; errors are :class:`~rayjobs.errors.RayjobsError`
subclasses with one-line messages (what was wrong, what to do next). The modules: :mod:`.job`
(the handle), :mod:`.submitting`, :mod:`.listing`, :mod:`.stopping`, :mod:`.control` (resume,
rerun, evaluate), :mod:`.curves` (plot, compare), :mod:`.clusterinfo`, :mod:`.settingsinfo`,
:mod:`.keeping` (the local record's copies of what the views read), :mod:`.localrecord` (what is kept
there), :mod:`.local` (the embedded head: start, status, stop), :mod:`.clusterlife` (up, connect, down)
and :mod:`.people` (login, users, audit).
"""

from rayjobs.api.clusterinfo import cluster_view
from rayjobs.api.clusterlife import base_image_note, cluster_down, cluster_name, cluster_up, connect_cluster, \
    disconnect_cluster
from rayjobs.api.control import evaluate_checkpoints, rerun_job, resume_job
from rayjobs.api.stopping import stop_jobs
from rayjobs.api.curves import compare_sweep, plot_jobs
from rayjobs.api.job import Job, recorded_row
from rayjobs.api.listing import all_jobs, list_jobs
from rayjobs.api.local import LocalStart, LocalStatus, local_running_jobs, local_status, start_local, stop_local
from rayjobs.api.localrecord import kept_ended, kept_log_tail, record_dir
from rayjobs.api.settingsinfo import effective_settings, settings_notes
from rayjobs.api.submitting import plan_experiment, submit_experiment, submit_sweep
from rayjobs.api.replay import replay
from rayjobs.api.usage import usage

__all__ = ["Job", "all_jobs", "cluster_view", "compare_sweep", "effective_settings", "evaluate_checkpoints",
           "list_jobs", "plan_experiment", "plot_jobs", "recorded_row", "replay", "rerun_job", "resume_job", "settings_notes",
           "stop_jobs", "submit_experiment", "submit_sweep", "usage",
           # the embedded head, a cluster's life, the local record (issue 46: the CLI calls only these)
           "LocalStart", "LocalStatus", "start_local", "local_status", "local_running_jobs", "stop_local",
           "cluster_name", "cluster_up", "connect_cluster", "disconnect_cluster", "cluster_down", "base_image_note",
           "kept_log_tail", "kept_ended", "record_dir"]
