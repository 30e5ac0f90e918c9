"""The page's templates rendered: one Jinja2 environment over the package's ``templates/``,
autoescaped (a job id, a log line or a user's name is text, never markup)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from rayjobs.page import TEMPLATES
from rayjobs.page.views import num


@lru_cache(maxsize=1)
def environment() -> Environment:
    """The one environment (templates compiled once, kept)."""
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(["html"]),
                      trim_blocks=True, lstrip_blocks=True)
    env.globals["fmt"] = num
    return env


def render(template: str, /, **context: Any) -> str:
    """Template ``template`` with ``context`` (``me``, ``csrf`` and ``nav`` default to none)."""
    context.setdefault("me", None)
    context.setdefault("csrf", "")
    context.setdefault("nav", "")
    return environment().get_template(template).render(**context)
