"""The door's routes, one module per noun: jobs, logs, metrics, code, the queue, the cluster, users,
and the team's page (``page``: outside ``/v1`` and the OpenAPI document)."""

from __future__ import annotations

from rayjobs.door.routes import cluster, code, jobs, logs, metrics, page, queue, users

#: Every router of the door, in the order the OpenAPI document lists them.
ROUTERS = [queue.router, users.router, jobs.router, logs.router, metrics.router, code.router, cluster.router,
           page.api, page.router]
