"""Queue waits: when a pending job will start, with p10/p50/p90, learned from the center's past.

``snapshot`` holds the input and output models (a queue at one instant, the predicted
starts); ``jobs`` the history as arrays and the snapshot a trace implies at any instant;
``simulate`` the forward simulation of the queue (conservative backfilling); ``features``
the queue-state features; ``predictor`` the learned model and the two baselines;
``rule`` the planner's fixed rule and its measured error band; ``replay`` the replay
behind ``queue bench`` and ``benchmarks/waits.py``; ``job_start`` one job's start (MCP);
``live`` the snapshot and history of a real batch system through its executor.
"""
