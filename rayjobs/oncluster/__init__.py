"""What runs on the cluster: every job's runner, the queue actor and the runner's side of it, and
the per-node fit (pure, shared with the laptop's checks). Imports from the laptop side: only
:mod:`rayjobs.shared`."""
