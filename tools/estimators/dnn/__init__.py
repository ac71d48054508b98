"""HARP's DNN estimators (Build, Predict): time per training iteration and peak memory.

    paths        where the dataset and the shipped models live (no heavy imports)
    dataset      profiled rows -> examples (op graph of each configuration, cached)
    features     tabular, graph-summary and analytic features
    quantile     black-box XGBoost quantile regression (p10/p50/p90)
    gnn          white-box GNN (GraphSAGE, in-house) over the op graph + hardware features
    bundle       black-box, white-box and hybrid trained together; calibration,
                 HARP selection, saving and loading
    calibration  split-conformal widening of intervals; the safety factor
    selection    HARP's rule: fewest under-predictions, then lowest over-prediction
    metrics      MAPE, under-prediction rate, coverage
    roofline     GPUs by their specs; step time scaled across GPUs
    crosshw      Gavel/Pollux: predict a GPU never trained on
    adapter      the planner's Estimator protocol in front of the analytic fallback
    usermodel    a user's model file as a training task (and its errors)
    service      loading/training/registering the bundle; rightsize estimate's answers

Everything here is a pure function of its inputs or a small class around a trained model.
"""
