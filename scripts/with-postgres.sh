#!/usr/bin/env bash
# Run a command with a throwaway PostgreSQL server of its own, and a PgBouncer
# in front of it.
#
#   scripts/with-postgres.sh COMMAND [ARGS...]
#
# Starts Debian's PostgreSQL binaries (installing the package when they are
# missing and we are root) on a private socket directory and port, and exports
# BENCHLEDGER_TEST_PG_URL for the command. Then starts Debian's PgBouncer (the
# pgbouncer package, installed the same way) in transaction pooling mode on a
# port of its own, routing any database name to that server, and exports
# BENCHLEDGER_TEST_PGBOUNCER_URL (with benchledger_pooler=transaction). Both are
# removed afterwards. With CI=true a server or a PgBouncer that cannot be had
# fails the run; otherwise their tests are skipped.
# When BENCHLEDGER_TEST_PG_URL is already set, the command runs against it (and
# against BENCHLEDGER_TEST_PGBOUNCER_URL if that is set too): nothing is started.
set -euo pipefail

if [ -n "${BENCHLEDGER_TEST_PG_URL:-}" ]; then
  exec "$@"
fi

apt_install() {
  echo "with-postgres: installing Debian's $1 package" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq "$1" >&2
}

find_bindir() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; fi
  done | sort -V | tail -n 1
}

find_pgbouncer() {
  if command -v pgbouncer 2>/dev/null; then return; fi
  if [ -x /usr/sbin/pgbouncer ]; then echo /usr/sbin/pgbouncer; fi
}

bindir=$(find_bindir || true)
if [ -z "$bindir" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt_install postgresql
    bindir=$(find_bindir || true)
  fi
fi
if [ -z "$bindir" ]; then
  echo "with-postgres: no PostgreSQL server binaries found (install Debian's postgresql package)" >&2
  if [ "${CI:-}" = "true" ]; then exit 1; fi
  echo "with-postgres: running without PostgreSQL; PostgreSQL tests will be skipped" >&2
  exec "$@"
fi

pgbouncer=$(find_pgbouncer)
if [ -z "$pgbouncer" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt_install pgbouncer
    pgbouncer=$(find_pgbouncer)
  fi
fi
if [ -z "$pgbouncer" ]; then
  echo "with-postgres: no pgbouncer found (install Debian's pgbouncer package)" >&2
  if [ "${CI:-}" = "true" ]; then exit 1; fi
  echo "with-postgres: running without PgBouncer; PgBouncer tests will be skipped" >&2
fi

# The server and PgBouncer refuse to run as root: run them as the postgres user.
run_as=()
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --home /var/lib/postgresql postgres
  run_as=(runuser -u postgres --)
fi

workdir=$(mktemp -d /tmp/benchledger-pg.XXXXXX)
chmod 755 "$workdir"
[ "$(id -u)" = 0 ] && chown postgres "$workdir"
# Two free ports, held together while chosen so that they differ.
read -r port bouncer_port < <(python3 -c '
import socket
held = [socket.socket() for _ in range(2)]
for s in held:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in held))')
bouncer="$workdir/pgbouncer"

cleanup() {
  if [ -s "$bouncer/pgbouncer.pid" ]; then
    local pid _
    pid=$(cat "$bouncer/pgbouncer.pid")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  "${run_as[@]}" "$bindir/pg_ctl" -D "$workdir/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$workdir"
}
trap cleanup EXIT

"${run_as[@]}" "$bindir/initdb" -D "$workdir/data" -U postgres --auth=trust -E UTF8 \
  --no-instructions >"$workdir/initdb.log" 2>&1 || { cat "$workdir/initdb.log" >&2; exit 1; }
# Durability is not under test here: fsync off makes the throwaway server fast.
# The benchmarks set BENCHLEDGER_PG_DURABLE=1: a server as deployed (fsync on,
# every commit flushed), since what a commit costs is what batching saves.
durability="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
if [ "${BENCHLEDGER_PG_DURABLE:-}" = 1 ]; then
  durability="-c fsync=on -c synchronous_commit=on -c full_page_writes=on"
fi
"${run_as[@]}" "$bindir/pg_ctl" -D "$workdir/data" -l "$workdir/server.log" -w -t 60 \
  -o "-c listen_addresses=127.0.0.1 -p $port -k $workdir $durability -c max_connections=200" \
  start >/dev/null || { cat "$workdir/server.log" >&2; exit 1; }

export BENCHLEDGER_TEST_PG_URL="postgresql+psycopg://postgres@127.0.0.1:$port/postgres"
echo "with-postgres: PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') on port $port" >&2

if [ -n "$pgbouncer" ]; then
  # Transaction pooling, as a busy deployment runs it: each transaction may get
  # another server connection, so nothing may rely on session state. Every
  # database name goes to the server over its socket (the tests make one per
  # test). Trust auth, but the user must be in the auth file. server_login_retry
  # of 1 s: reconnect soon after the server restarts (the default waits 15 s);
  # query_wait_timeout of 5 s: while the server is down a client waits in
  # PgBouncer's queue that long, then gets a transient fault it retries (the
  # default holds it 120 s, longer than a lease).
  mkdir "$bouncer"
  echo '"postgres" ""' >"$bouncer/userlist.txt"
  printf '%s\n' \
    "[databases]" \
    "* = host=$workdir port=$port" \
    "" \
    "[pgbouncer]" \
    "listen_addr = 127.0.0.1" \
    "listen_port = $bouncer_port" \
    "unix_socket_dir = $bouncer" \
    "pidfile = $bouncer/pgbouncer.pid" \
    "logfile = $bouncer/pgbouncer.log" \
    "auth_type = trust" \
    "auth_file = $bouncer/userlist.txt" \
    "admin_users = postgres" \
    "pool_mode = transaction" \
    "max_client_conn = 2000" \
    "default_pool_size = 20" \
    "server_login_retry = 1" \
    "query_wait_timeout = 5" \
    >"$bouncer/pgbouncer.ini"
  [ "$(id -u)" = 0 ] && chown -R postgres "$bouncer"
  "${run_as[@]}" "$pgbouncer" -d -q "$bouncer/pgbouncer.ini" ||
    { cat "$bouncer/pgbouncer.log" >&2 || true; exit 1; }
  for _ in $(seq 100); do
    if "$bindir/pg_isready" -q -h 127.0.0.1 -p "$bouncer_port" -U postgres -d postgres; then
      break
    fi
    sleep 0.1
  done
  if ! "$bindir/pg_isready" -q -h 127.0.0.1 -p "$bouncer_port" -U postgres -d postgres; then
    echo "with-postgres: PgBouncer did not start" >&2
    cat "$bouncer/pgbouncer.log" >&2 || true
    exit 1
  fi
  export BENCHLEDGER_TEST_PGBOUNCER_URL="postgresql+psycopg://postgres@127.0.0.1:$bouncer_port/postgres?benchledger_pooler=transaction"
  echo "with-postgres: PgBouncer $("$pgbouncer" --version | awk 'NR == 1 {print $2}') (transaction pooling) on port $bouncer_port" >&2
fi

set +e
"$@"
status=$?
set -e
exit $status
