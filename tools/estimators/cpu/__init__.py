"""HARP's estimators of DNN training on CPUs (Build, Predict): time per iteration and peak memory.

    paths             where the dataset and the shipped models live (no heavy imports)
    dataset           profiled rows -> examples (op graph of each configuration, cached)
    features          tabular, graph-summary and analytic features
    quantile          black-box XGBoost quantile regression (p10/p50/p90)
    gnn               white-box GNN (GraphSAGE, in-house) over the op graph + hardware features
    bundle            black-box, white-box and hybrid trained together; calibration,
                      HARP selection, saving and loading
    memory_refit      the memory hybrid refitted and validated alone (no GNN inputs)
    calibration       split-conformal widening of intervals; the safety factor
    selection         HARP's rule: fewest under-predictions, then lowest over-prediction
    metrics           MAPE, under-prediction rate, coverage
    opcost, opboost   the per-operator CPU model (priced per unit of roofline work)
    eager             the operators eager PyTorch runs that a trace does not show
    coverage          what share of a model's work was priced, and how
    host_calibration  ``rightsize profile calibrate``: this host's per-operator timings
    answer            loading/training/registering the bundle; the CPU answers of
                      ``rightsize estimate``

A user's model file is read by ``tools.estimators.model_file``; GPUs are in
``tools.estimators.gpu``. Everything here is a pure function of its inputs or a small
class around a trained model.
"""
