"""The one typed contract between the laptop and the cluster, spelled once.

Both sides import it, so it imports nothing but the standard library and itself:

* :mod:`~rayjobs.contract.status` -- a job's status (what users see) and a record's state (the queue's);
* :mod:`~rayjobs.contract.meta` -- the metadata a job carries, to and from Ray's ``str -> str`` metadata;
* :mod:`~rayjobs.contract.record` -- the queue's durable job record (versioned, with its JSON form);
* :mod:`~rayjobs.contract.paths` -- a run's paths (checkpoints, metrics per attempt, requests);
* :mod:`~rayjobs.contract.wire` -- the queue API's requests and answers (routes under ``/v1``);
* :mod:`~rayjobs.contract.files` -- the one atomic write;
* :mod:`~rayjobs.contract.ids` -- the one id/prefix resolution;
* :mod:`~rayjobs.contract.names` -- the one did-you-mean;
* :mod:`~rayjobs.contract.target` -- which cluster to talk to, and how;
* :mod:`~rayjobs.contract.capacity` -- per-node fit of GPU groups (the queue admits by it, preflight refuses by it).
"""
