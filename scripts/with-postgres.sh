#!/usr/bin/env bash
# Run a command with a throwaway PostgreSQL server of its own.
#
#   scripts/with-postgres.sh COMMAND [ARGS...]
#
# Starts Debian's PostgreSQL binaries (installing the package when they are
# missing and we are root) on a private socket directory and port, exports
# BENCHLEDGER_TEST_PG_URL for the command, and removes the server afterwards.
# When BENCHLEDGER_TEST_PG_URL is already set, the command runs against it.
set -euo pipefail

if [ -n "${BENCHLEDGER_TEST_PG_URL:-}" ]; then
  exec "$@"
fi

find_bindir() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; fi
  done | sort -V | tail -n 1
}

bindir=$(find_bindir || true)
if [ -z "$bindir" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "with-postgres: installing Debian's postgresql package" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq postgresql >&2
    bindir=$(find_bindir || true)
  fi
fi
if [ -z "$bindir" ]; then
  echo "with-postgres: no PostgreSQL server binaries found (install Debian's postgresql package)" >&2
  if [ "${CI:-}" = "true" ]; then exit 1; fi
  echo "with-postgres: running without PostgreSQL; PostgreSQL tests will be skipped" >&2
  exec "$@"
fi

# The server refuses to run as root: run it as the postgres user.
run_as=()
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --home /var/lib/postgresql postgres
  run_as=(runuser -u postgres --)
fi

workdir=$(mktemp -d /tmp/benchledger-pg.XXXXXX)
chmod 755 "$workdir"
[ "$(id -u)" = 0 ] && chown postgres "$workdir"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

cleanup() {
  "${run_as[@]}" "$bindir/pg_ctl" -D "$workdir/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$workdir"
}
trap cleanup EXIT

"${run_as[@]}" "$bindir/initdb" -D "$workdir/data" -U postgres --auth=trust -E UTF8 \
  --no-instructions >"$workdir/initdb.log" 2>&1 || { cat "$workdir/initdb.log" >&2; exit 1; }
# Durability is not under test here: fsync off makes the throwaway server fast.
"${run_as[@]}" "$bindir/pg_ctl" -D "$workdir/data" -l "$workdir/server.log" -w -t 60 \
  -o "-c listen_addresses=127.0.0.1 -p $port -k $workdir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
  start >/dev/null || { cat "$workdir/server.log" >&2; exit 1; }

export BENCHLEDGER_TEST_PG_URL="postgresql+psycopg://postgres@127.0.0.1:$port/postgres"
echo "with-postgres: PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') on port $port" >&2
set +e
"$@"
status=$?
set -e
exit $status
