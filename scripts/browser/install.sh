#!/usr/bin/env bash
# Headless Chromium and its WebDriver for the `browser` tests (Debian's `chromium` and
# `chromium-driver` packages). Idempotent: does nothing when both are already installed.
# Needs root to install; without it, says so and exits 0 (the tests then skip outside CI
# and fail in CI=true).
set -euo pipefail

if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "[rightsize-browser] chromium/chromedriver missing and not root: not installing" >&2
    exit 0
fi
echo "[rightsize-browser] installing chromium and chromium-driver with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2 || true
apt-get install -y -qq --no-install-recommends chromium chromium-driver >&2
command -v chromium >/dev/null && command -v chromedriver >/dev/null
