"""The submit plane: build the frozen :class:`~rayjobs.submit.spec.JobSpec` of a config composed by
:mod:`rayjobs.config`, check it (dry-run stops here), send it, record it in :mod:`rayjobs.ledger`.

``python -m rayjobs.submit +exp=NAME [key=value ...]`` runs :mod:`rayjobs.submit.__main__`.
"""
