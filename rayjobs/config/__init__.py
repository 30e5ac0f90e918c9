"""The config plane: a Hydra config composed and checked, the same for a submit and its preflight.

:mod:`~rayjobs.config.compose` composes (the search path, verl's tree, error translation, settings
applied), :mod:`~rayjobs.config.schema` types rayjobs' own keys, :mod:`~rayjobs.config.configcache`
keeps plain copies of composed configs and :mod:`~rayjobs.config.derive` derives a sweep's points
from its base. It imports nothing of ``submit`` or ``preflight``: both import it.
"""
