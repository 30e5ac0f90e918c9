"""The submit plane: compose a Hydra config, build the frozen :class:`~rayjobs.submit.spec.JobSpec`,
check it (dry-run stops here), send it, record it.

``python -m rayjobs.submit +exp=NAME [key=value ...]`` runs :mod:`rayjobs.submit.__main__`.
"""
