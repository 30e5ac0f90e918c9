"""The team's page: what the door serves at ``/`` to a browser -- the queue, a job's live curves and
log, a sweep with its rungs, who used which GPUs. Server-side Jinja2 templates (``templates/``) over
contexts built from recorded data (:mod:`rayjobs.page.views`), small partial updates with htmx and
curves with uPlot, both vendored under ``static/vendor/`` (pinned, their licences beside them):
nothing loads from outside. The routes: :mod:`rayjobs.door.routes.page`.
"""

from __future__ import annotations

from pathlib import Path

#: The page's templates and static files, shipped in the package.
TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
#: The vendored scripts: name -> (npm package@version, file). Pinned; a test checks they are there.
VENDORED = {"htmx": ("htmx.org@2.0.4", "vendor/htmx/htmx.min.js"),
            "uplot": ("uplot@1.6.32", "vendor/uplot/uPlot.iife.min.js")}
