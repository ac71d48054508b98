#!/usr/bin/env bash
# The whole check, exactly as CI runs it (Quick start line 2; .ci/run calls this):
# install into .venv, lint, format-check, type-check, start local services, test.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not kafka"`.
set -euo pipefail
cd "$(dirname "$0")/.."
# Python keeps compiled modules (pytest its rewritten tests) in __pycache__. Where
# PYTHONDONTWRITEBYTECODE is set (these VMs set it), every pytest and every `python -m
# rightsize` a test starts compiled the project again: a collection took 25 s CPU instead of 15.
unset PYTHONDONTWRITEBYTECODE

python3 -m venv .venv
.venv/bin/pip install -q -e '.[dev]'

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy

# A real single-node SLURM for the `slurm` tests (installs slurm-wlm and munge with
# apt-get on first use; needs root). Without root the tests start nothing, and skip
# outside CI or fail in CI.
if [ "$(id -u)" = 0 ]; then
    eval "$(bash scripts/slurm/start.sh | tail -n 1)"
fi

# Headless Chromium and chromedriver for the `browser` tests (apt-get on first use, as
# root; a no-op when both are installed).
bash scripts/browser/install.sh

# With arguments (`bash scripts/test.sh -k catalog`): one pytest run, as asked.
if [ "$#" -gt 0 ]; then
    exec .venv/bin/pytest --durations=20 "$@"
fi

# The whole suite in three pytest runs side by side. The `slurm` tests mostly wait on the
# cluster's one node, in two lanes in the background: the end-to-end ones (tests/e2e: a
# researcher's hour, the cascade; minutes of CLI runs and training) and the rest, one
# test after another in each lane. Their bounded waits allow for a job queued behind the
# other lane's, no test counts the other lane's jobs, and none stops the shared controller
# (a test that does so starts its own cluster: tests/private_slurm.py). Everything else
# runs meanwhile; a test not marked `slurm` does not see the cluster (tests/conftest.py
# unsets SLURM_CONF for it), on two pytest-xdist workers: much of it waits too (brokers,
# subprocesses, agents settling), and one worker would leave a core idle meanwhile. The
# slurm lanes' output follows the rest's.
e2e_log="$(mktemp)"
slurm_log="$(mktemp)"
.venv/bin/pytest -m "slurm and e2e" -p no:cacheprovider --durations=10 tests/e2e >"$e2e_log" 2>&1 &
e2e_pid=$!
.venv/bin/pytest -m "slurm and not e2e" -p no:cacheprovider --durations=10 >"$slurm_log" 2>&1 &
slurm_pid=$!
rest=0
.venv/bin/pytest -m "not slurm" -n 2 --dist worksteal --durations=20 || rest=$?
e2e=0
wait "$e2e_pid" || e2e=$?
slurm=0
wait "$slurm_pid" || slurm=$?
echo
echo "================ the slurm tests, end to end (run beside the rest) ================"
cat "$e2e_log"
echo
echo "================ the other slurm tests (run beside the rest) ================"
cat "$slurm_log"
rm -f "$e2e_log" "$slurm_log"
if [ "$rest" -ne 0 ]; then exit "$rest"; fi
if [ "$e2e" -ne 0 ]; then exit "$e2e"; fi
exit "$slurm"
