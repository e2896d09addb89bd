#!/usr/bin/env bash
# Make sure Debian's Chromium is there for the dashboard's browser tests.
#
#   scripts/ensure-chromium.sh
#
# Installs the `chromium` package with apt-get when /usr/bin/chromium is
# missing and we are root (as scripts/with-postgres.sh does for PostgreSQL).
# Without it, the browser tests are skipped, except under CI=true, where
# they fail (tests/dashboard/conftest.py) and this script already exits 1.
set -euo pipefail

browser=${BENCHLEDGER_CHROMIUM:-/usr/bin/chromium}
if [ -x "$browser" ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "ensure-chromium: installing Debian's chromium package" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq chromium >&2
fi
if [ -x "$browser" ]; then
  exit 0
fi
echo "ensure-chromium: no Chromium at $browser (install Debian's chromium package)" >&2
if [ "${CI:-}" = "true" ]; then exit 1; fi
echo "ensure-chromium: the dashboard's browser tests will be skipped" >&2
