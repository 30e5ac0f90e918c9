"""What the door answers when it refuses: each status's meaning, as the OpenAPI document declares it.

Every refusal is one :class:`~rayjobs.contract.wire.ApiError` line; each route declares the
statuses it may refuse with, every router the ones any request may meet (identity, a crash), and
``default`` says any other status is an ApiError too.
"""

from __future__ import annotations

from typing import Any

from rayjobs.contract import wire

#: What each refusal status means.
REFUSALS = {
    400: "the body is not JSON",
    401: "no token, or one the door does not know (the cluster's or a user's, as Authorization: Bearer)",
    403: "the caller's role or ownership does not allow it",
    404: "no such job, record, user or code snapshot",
    409: "the job's state does not allow it (ended, still running, its code not uploaded yet)",
    413: "the body is over the API's limit",
    422: "a field is missing, unknown or of the wrong type, or a value is refused",
    429: "too many failed authentications from this address: it is blocked for a while",
    500: "the queue failed on the request (its log is the queue actor's)",
    507: "the queue could not write its records: the storage root is full or gone",
}
BODY = (400, 413, 422)  #: what a route with a JSON body may answer for the body alone


def refusals(*statuses: int) -> dict[Any, dict[str, Any]]:
    """The ``responses`` of a route that refuses with ``statuses`` (all one-line :class:`wire.ApiError`)."""
    return {s: {"model": wire.ApiError, "description": REFUSALS[s]} for s in statuses}


#: Every router's: identity's refusals, a crash, and ``default`` (FastAPI's own 422 schema, which
#: the door never answers with, is not declared).
COMMON = {**refusals(401, 429, 500), "default": {
    "model": wire.ApiError, "description": "any refusal: one line, what was wrong and what to do"}}
