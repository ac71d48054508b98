"""Per-operator GPU training-step estimator: roofline x learned efficiency, from specs only.

Heavy parts (torch tracing, xgboost) are imported inside functions: the CLI starts fast.
"""
