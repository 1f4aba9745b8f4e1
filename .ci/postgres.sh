#!/usr/bin/env bash
# Start a throw-away PostgreSQL server on loopback for the store tests; prints the URL.
# Prints nothing (and the tests skip with a reason) when no server can be had.
set -u
PORT=${ACCEL_PG_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) >&2 || exit 0
fi
BINDIR=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | tail -n1)")
[ -x "$BINDIR/initdb" ] || BINDIR=$(dirname "$(command -v initdb)")
id postgres >/dev/null 2>&1 || exit 0
DATA=$(mktemp -d /tmp/accel-pg.XXXXXX)
chown postgres "$DATA"
su postgres -s /bin/sh -c "'$BINDIR/initdb' -D '$DATA' -A trust -U postgres >/dev/null" >&2 || exit 0
su postgres -s /bin/sh -c "'$BINDIR/pg_ctl' -D '$DATA' -o '-p $PORT -k /tmp -c listen_addresses=127.0.0.1' -l '$DATA/log' -w start >/dev/null" >&2 || exit 0
"$BINDIR/createdb" -h 127.0.0.1 -p "$PORT" -U postgres accel_test >&2 2>/dev/null || psql -h 127.0.0.1 -p "$PORT" -U postgres -c 'create database accel_test' >&2 || exit 0
echo "postgresql+psycopg://postgres@127.0.0.1:$PORT/accel_test"
