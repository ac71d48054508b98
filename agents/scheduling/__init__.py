"""The Scheduler's parts, each readable alone (``agents.scheduler`` assembles them).

actions.py        what the Scheduler may decide to do (``Submit``, ``Conclude``...)
observations.py   what it senses, a tagged union: one model per kind of happening
entries.py        pure reading and marking of a plan's ledger (``Plan.segments``)
sensing.py        from an event to an observation: the plan, the job, the executor
decisions.py      pure: one handler per kind of observation, to actions
submission.py     submitting a ledger entry exactly once; recovery after a restart
rescheduling.py   ending plans, re-plans, in-place walltime raises, cancels
"""
