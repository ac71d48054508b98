"""Actuators: the hands that submit, watch and cancel batch jobs.

One interface (``Executor``) over SLURM's CLI, the Tapis v3 Jobs API and a simulated
cluster; native states map to ``knowledge_base.records.JobState`` through a table per
backend; every error says whether a retry can help (``transient``).
"""
