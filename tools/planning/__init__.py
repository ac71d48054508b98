"""Planning: from a WorkloadSpec to a policy-valid, queue-aware, priced plan.

The pipeline, each step a module and each decision a pure function:

    workload_files  read a WorkloadSpec (YAML/JSON)
    whatif          enumerate every option the workload allows and estimate each
      estimation      the estimator seam (a Protocol; trained estimators plug in here)
      analytic        the analytic DNN fallback (zoo FLOPs, peaks, Gavel-fitted efficiency)
        zoo             parameters, FLOPs and activations of well-known models, with sources
        hardware        GPU efficiency (fitted), CPU peaks and efficiency (documented)
        gavel_fit       the fit on Gavel's measured throughputs, and its error
      generic         generic jobs: the history estimator, else the user's guess widened
    builder         walltime, memory, cascades, cost, wait, final policy check
      cascade         checkpointed segments past a partition's time limit
      cost            the center's own unit and rules; dollars only as labelled assumptions
      queue           availability and expected wait from a queue snapshot
    selector        hard constraints (budget, deadline) and the objective
    results         PlannedOption, Infeasible, and the JSON forms (PlanSummary, PlanReport)
    render          sbatch scripts and Tapis v3 job requests from a plan

See docs/planning.md.
"""
