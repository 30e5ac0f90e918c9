"""The door's routes, one module per noun: jobs, logs, metrics, code, the queue, the cluster, users."""

from __future__ import annotations

from rayjobs.door.routes import cluster, code, jobs, logs, metrics, queue, users

#: Every router of the door, in the order the OpenAPI document lists them.
ROUTERS = [queue.router, users.router, jobs.router, logs.router, metrics.router, code.router, cluster.router]
