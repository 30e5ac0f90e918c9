"""Tools for verl's multi-turn agent loop, shipped in the job's working_dir (``+exp=gsm8k_multiturn_tools``).

The job's working_dir is rayjobs' ``scripts/`` folder, so on every node this package imports as
``multiturn`` (Ray puts the working_dir on ``PYTHONPATH`` and makes it the cwd of every worker).
"""
