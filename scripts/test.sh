#!/usr/bin/env bash
# The whole check, exactly as CI runs it (Quick start line 2; .ci/run calls this):
# install into .venv, lint, format-check, type-check, start local services, test.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not kafka"`.
set -euo pipefail
cd "$(dirname "$0")/.."

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

# The whole suite in two pytest runs side by side: the `slurm` tests (they share the
# cluster's one node, so they run one after another, and mostly wait on it) in the
# background, everything else meanwhile. A test not marked `slurm` does not see the cluster
# (tests/conftest.py unsets SLURM_CONF for it). The slurm run's output follows the rest's.
slurm_log="$(mktemp)"
.venv/bin/pytest -m slurm -p no:cacheprovider --durations=10 >"$slurm_log" 2>&1 &
slurm_pid=$!
rest=0
.venv/bin/pytest -m "not slurm" --durations=20 || rest=$?
slurm=0
wait "$slurm_pid" || slurm=$?
echo
echo "================ the slurm tests (run beside the rest) ================"
cat "$slurm_log"
rm -f "$slurm_log"
if [ "$rest" -ne 0 ]; then exit "$rest"; fi
exit "$slurm"
