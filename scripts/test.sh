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

.venv/bin/pytest "$@"
