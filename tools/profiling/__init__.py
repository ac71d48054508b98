"""Profiling: the model zoo, the one-configuration profiler, sweeps and op graphs (HARP Generate).

``zoo`` builds parametrized PyTorch models in families; ``profiler`` measures one
downsized training configuration in a child process; ``sweep`` runs many, resumably,
into a JSONL dataset with provenance; ``opgraph`` extracts the operator graph of one
training step for white-box estimators.
"""
