"""Preflight: catch on the laptop, in about a second, what would otherwise fail on the GPUs.

:mod:`~rayjobs.preflight.checks` runs the layers over every point of a submission;
:mod:`~rayjobs.preflight.rules` are rayjobs' own rules, :mod:`~rayjobs.preflight.verlcheck` verl's
own validation (run by the warm :mod:`~rayjobs.preflight.helper` process) and
:mod:`~rayjobs.preflight.clusterfiles` the files and secrets a job reads on the cluster.
"""
