#!/bin/sh
# Initialise the data folder on first start as the official image does, then run the server.
set -e
DATA=/var/lib/postgresql/data
BIN="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
mkdir -p "$DATA" && chown -R postgres:postgres "$DATA" && chmod 700 "$DATA"
if [ ! -s "$DATA/PG_VERSION" ]; then
  printf '%s\n' "$POSTGRES_PASSWORD" > /tmp/pwfile && chown postgres /tmp/pwfile
  runuser -u postgres -- "$BIN/initdb" -D "$DATA" -U "$POSTGRES_USER" --pwfile=/tmp/pwfile \
    --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
  rm /tmp/pwfile
  runuser -u postgres -- "$BIN/pg_ctl" -D "$DATA" -o "-c listen_addresses= -k /tmp" -w start
  runuser -u postgres -- psql -q -h /tmp -U "$POSTGRES_USER" -d postgres \
    -c "CREATE DATABASE \"$POSTGRES_DB\""
  runuser -u postgres -- "$BIN/pg_ctl" -D "$DATA" -w stop
fi
exec runuser -u postgres -- "$BIN/postgres" -D "$DATA" -k /tmp "$@"
