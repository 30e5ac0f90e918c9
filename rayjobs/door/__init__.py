"""The head's front door: one HTTP API (and later the page) in front of the queue, with identity.

* :mod:`~rayjobs.door.users` -- users, roles, tokens (kept hashed, shown once), revocation;
* :mod:`~rayjobs.door.permissions` -- who may do what: one table, pure;
* :mod:`~rayjobs.door.audit` -- every changing or refused request, appended durably;
* :mod:`~rayjobs.door.limits` -- failed authentications per address: a growing block;
* :mod:`~rayjobs.door.tls` -- the self-signed certificate the door serves teammates with;
* :mod:`~rayjobs.door.identity` -- a request's identity (the FastAPI dependency);
* :mod:`~rayjobs.door.app` and :mod:`~rayjobs.door.routes` -- the FastAPI app, routes by noun;
* :mod:`~rayjobs.door.host` -- the Ray actor that runs the queue's loop and serves the app.

Imports go one way: door -> oncluster, contract, shared, errors. Nothing of rayjobs imports door;
the node script and the laptop's starters run ``python3 -m rayjobs.door.host start``.
"""
