#!/usr/bin/env bash
# Postgres 18 and RabbitMQ 4.3 for `make test-current`: the newest releases, from a
# Debian forky root on this machine, beside (never instead of) the machine's own
# Postgres 15 and RabbitMQ 3.10, on loopback ports of their own.
#
#   servers.sh bootstrap   build the forky root if it is missing (about a minute, once)
#   servers.sh start       bootstrap, then start both servers on fresh data directories
#   servers.sh env         the TEST_* variables that point the tests at them
#   servers.sh stop        stop both and remove their data (safe to run any time)
#   servers.sh run CMD...  start, run CMD with the TEST_* variables, stop whatever happens
#
# The root is debootstrap's minbase forky (Debian testing) with rabbitmq-server and
# postgresql-18, cached outside the repository (BOOKSTORE_CURRENT_ROOT, default
# /var/cache/bookstore/forky). Debian's debootstrap of bookworm has no script for forky:
# sid's serves, as it does for every suite after the one debootstrap knows. It
# is built in ROOT.tmp and renamed into place only when complete, so a bootstrap that was
# killed leaves no root behind and the next one starts over. Nothing here changes the root
# after that but for one empty directory, the data directory's mount point: others may run
# programs from it too. RabbitMQ 4.3 does not boot unless its root's /etc/hosts names
# localhost, so the bootstrap makes sure it does.
#
# Both servers run inside it with chroot, as its own postgres and rabbitmq users, sharing
# the machine's network. They start in a mount namespace of their own, where /proc, /dev,
# a /dev/shm (Postgres's shared memory) and the data directory are mounted into the root:
# nobody else sees those mounts, and they vanish with the last server process. The data
# directory (BOOKSTORE_CURRENT_DATA, default ROOT-current beside the root) is made anew by
# each start and removed by stop, and is mounted at the same path inside the root, so a
# path a server reports (its log, its TLS certificate) is a path on this machine too.
#
# Postgres: initdb's cluster, superuser postgres, trust on loopback only, and TLS with a
# fresh self-signed certificate for localhost, as Debian's snakeoil one is on the
# machine's server (services/platform/pgdb's TLS test reads it). RabbitMQ: docker
# compose's broker (deploy/rabbitmq: rabbitmq.conf, enabled_plugins, definitions.json
# with its service users and admin/admin) on its own ports, plus guest/guest as an
# administrator, the user the tests log in as and give each test's vhost to (testenv).
# The Erlang VM gets an epmd of its own (ERL_EPMD_PORT), so it neither registers with the
# machine's epmd on 4369 nor leaves anything running there when it stops.
#
# Every server process carries a marker in its environment; stop ends only processes with
# that marker. Needs root (chroot, mount). One user of a data directory at a time: run,
# start and stop take its lock.
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
ROOT="${BOOKSTORE_CURRENT_ROOT:-/var/cache/bookstore/forky}"
DATA="${BOOKSTORE_CURRENT_DATA:-$ROOT-current}"
MIRROR="${BOOKSTORE_CURRENT_MIRROR:-http://deb.debian.org/debian}"
SUITE=forky
# Loopback ports below the ephemeral range (32768-60999), so no outgoing connection of a
# test can hold one when a server wants it, and beside the machine's 5432/5672/15672/4369.
PG_PORT="${CURRENT_PG_PORT:-5433}"
AMQP_PORT="${CURRENT_AMQP_PORT:-5673}"
MANAGEMENT_PORT="${CURRENT_MANAGEMENT_PORT:-15673}"
PROMETHEUS_PORT="${CURRENT_PROMETHEUS_PORT:-15693}"
DIST_PORT="${CURRENT_DIST_PORT:-25673}"
EPMD_PORT="${CURRENT_EPMD_PORT:-24369}"
NODE="bookstore-current@localhost"

pg_bin=/usr/lib/postgresql/18/bin
marker="BOOKSTORE_CURRENT_SERVERS=$DATA" # in the environment of every server process

say() { echo "servers.sh: $*" >&2; }
die() {
  say "$*"
  exit 1
}

# id_in_root prints the uid:gid of a user of the root's own /etc/passwd: the root's
# postgres and rabbitmq need not have the machine's ids.
id_in_root() {
  awk -F: -v u="$1" '$1 == u { print $3 ":" $4; found = 1 } END { exit !found }' "$ROOT/etc/passwd" ||
    die "no user $1 in $ROOT/etc/passwd: remove $ROOT and bootstrap again"
}

# in_root runs a program inside the root as a user of its own, with a clean environment
# holding the marker and the given NAME=value variables. SETSID=setsid detaches it.
in_root() {
  local user="$1"
  shift
  ${SETSID:-} chroot --userspec="$(id_in_root "$user")" "$ROOT" /usr/bin/env -i \
    PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$marker" "$@"
}

bootstrap() {
  if [[ -x $ROOT$pg_bin/postgres && -n $(compgen -G "$ROOT/usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin/rabbitmq-server") ]]; then
    return
  fi
  [[ ! -e $ROOT ]] || die "$ROOT exists but has no Postgres 18 or RabbitMQ: remove it and run again"
  command -v debootstrap >/dev/null || die "debootstrap is missing: apt-get install debootstrap"
  local tmp="$ROOT.tmp" began=$SECONDS
  rm -rf "$tmp"
  mkdir -p "$(dirname "$ROOT")"
  say "bootstrapping Debian $SUITE with Postgres 18 and RabbitMQ into $ROOT (about a minute, once)"
  debootstrap --variant=minbase --include=rabbitmq-server,postgresql-18,ca-certificates \
    "$SUITE" "$tmp" "$MIRROR" /usr/share/debootstrap/scripts/sid >"$tmp.log" 2>&1 ||
    die "debootstrap failed; its log: $tmp.log"
  grep -qE '^127\.0\.0\.1[[:space:]]+(.*[[:space:]])?localhost([[:space:]]|$)' "$tmp/etc/hosts" 2>/dev/null ||
    printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >>"$tmp/etc/hosts"
  mv "$tmp" "$ROOT"
  rm -f "$tmp.log"
  say "bootstrapped in $((SECONDS - began))s"
}

# mine lists the server processes of this data directory that still run: those whose
# environment carries the marker. (Postgres's backends overwrite theirs with their process
# titles; they end with the postmaster, which keeps it.)
mine() {
  grep -lxzF "$marker" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 || true
}

# is_mine says whether process $1 is one of mine.
is_mine() { mine | grep -xF "$1" >/dev/null; }

# wait_gone waits up to $2 seconds for process $1 to end.
wait_gone() {
  for _ in $(seq 1 $(($2 * 10))); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.1
  done
  return 1
}

# serve mounts what the servers need and starts them. start runs it in a mount namespace
# of its own, which lives as long as the servers do.
serve() {
  mount -t proc proc "$ROOT/proc"
  mount --bind /dev "$ROOT/dev"
  mount -t tmpfs -o mode=1777,size=256m shm "$ROOT/dev/shm"
  mkdir -p "$ROOT$DATA"
  mount --bind "$DATA" "$ROOT$DATA"
  start_postgres
  start_rabbitmq
}

start_postgres() {
  local dir="$DATA/postgres"
  mkdir -p "$dir"
  chown "$(id_in_root postgres)" "$dir"
  in_root postgres "$pg_bin/initdb" -D "$dir/data" -U postgres --auth=trust \
    -E UTF8 --locale=C --no-sync >"$dir/initdb.log" 2>&1 || die "initdb failed: $(tail -5 "$dir/initdb.log")"
  # A self-signed certificate for localhost, its own CA, as Debian's snakeoil one is.
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=localhost \
    -addext subjectAltName=DNS:localhost -keyout "$dir/server.key" -out "$dir/server.crt" 2>/dev/null
  chown "$(id_in_root postgres)" "$dir/server.key" "$dir/server.crt"
  chmod 600 "$dir/server.key"
  # The machine's server in what the tests rely on: 100 connections, TLS; initdb's rest.
  cat >>"$dir/data/postgresql.conf" <<EOF

# servers.sh: loopback only, on a port of its own
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$dir'
max_connections = 100
ssl = on
ssl_cert_file = '$dir/server.crt'
ssl_key_file = '$dir/server.key'
log_line_prefix = '%m [%p] %q%u@%d '
EOF
  printf 'local all all trust\nhost all all 127.0.0.1/32 trust\n' >"$dir/data/pg_hba.conf"
  in_root postgres "$pg_bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 120 start >/dev/null ||
    die "Postgres 18 did not start: $(tail -20 "$dir/postgres.log")"
  in_root postgres "$pg_bin/postgres" --version >"$dir/version"
}

# rabbit_env is the environment of the broker: the node, its files, its ports, its epmd.
rabbit_env() {
  local d="$DATA/rabbitmq"
  echo HOME="$d" RABBITMQ_NODENAME="$NODE" ERL_EPMD_PORT="$EPMD_PORT" \
    RABBITMQ_CONFIG_FILE="$d/rabbitmq.conf" RABBITMQ_CONF_ENV_FILE="$d/rabbitmq-env.conf" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins" RABBITMQ_DIST_PORT="$DIST_PORT" \
    RABBITMQ_MNESIA_BASE="$d/mnesia" RABBITMQ_LOG_BASE="$d/log" RABBITMQ_PID_FILE="$d/rabbitmq.pid" \
    RABBITMQ_PLUGINS_EXPAND_DIR="$d/plugins"
}

start_rabbitmq() {
  local dir="$DATA/rabbitmq" conf
  mkdir -p "$dir"
  conf="$(cat "$repo/deploy/rabbitmq/rabbitmq.conf")"
  grep -q '^load_definitions = ' <<<"$conf" || die "deploy/rabbitmq/rabbitmq.conf no longer loads definitions: adapt servers.sh"
  cp "$repo/deploy/rabbitmq/definitions.json" "$repo/deploy/rabbitmq/enabled_plugins" "$dir/"
  : >"$dir/rabbitmq-env.conf"
  # Compose's file, reading the definitions from their copy here, on this node's ports.
  {
    sed "s|^load_definitions = .*|load_definitions = $dir/definitions.json|" <<<"$conf"
    cat <<EOF

# servers.sh: loopback ports of this node's own
listeners.tcp.default = 127.0.0.1:$AMQP_PORT
management.tcp.ip = 127.0.0.1
management.tcp.port = $MANAGEMENT_PORT
prometheus.tcp.ip = 127.0.0.1
prometheus.tcp.port = $PROMETHEUS_PORT
EOF
  } >"$dir/rabbitmq.conf"
  chown -R "$(id_in_root rabbitmq)" "$dir"
  # Idle schedulers sleep instead of spinning: the broker shares two cores with the tests.
  # shellcheck disable=SC2046 # rabbit_env's words are NAME=value pairs without spaces
  SETSID=setsid in_root rabbitmq $(rabbit_env) \
    "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=+sbwt none +sbwtdcpu none +sbwtdio none -kernel inet_dist_use_interface {127,0,0,1}" \
    /usr/lib/rabbitmq/bin/rabbitmq-server >"$dir/server.log" 2>&1 </dev/null &
  local admin="http://admin:admin@127.0.0.1:$MANAGEMENT_PORT/api" up=
  for _ in $(seq 1 240); do
    [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$admin/overview" || true) == 200 ]] && up=1 && break
    sleep 0.5
  done
  [[ -n $up ]] || die "RabbitMQ 4.3 did not start: $(tail -30 "$dir/server.log")"
  # guest/guest, an administrator on /, as on the machine's broker: definitions imported at
  # boot keep RabbitMQ from creating it.
  curl -sf -o /dev/null -X PUT -H 'content-type: application/json' \
    -d '{"password":"guest","tags":"administrator"}' "$admin/users/guest" &&
    curl -sf -o /dev/null -X PUT -H 'content-type: application/json' \
      -d '{"configure":".*","write":".*","read":".*"}' "$admin/permissions/%2F/guest" ||
    die "could not create the guest user"
}

start() {
  bootstrap
  stop
  mkdir -p "$DATA"
  local began=$SECONDS
  # What started before a failure is stopped again.
  unshare --mount --propagation private "$0" serve || {
    stop
    die "the servers did not start"
  }
  say "Postgres $(awk '{print $3}' "$DATA/postgres/version") on 127.0.0.1:$PG_PORT," \
    "RabbitMQ $(curl -s "http://guest:guest@127.0.0.1:$MANAGEMENT_PORT/api/overview" | jq -r .rabbitmq_version)" \
    "on :$AMQP_PORT (management :$MANAGEMENT_PORT), started in $((SECONDS - began))s"
}

stop() {
  local pid pids
  # Postgres's fast shutdown, RabbitMQ's graceful one (SIGTERM), then whatever is left (a
  # broker still booting, the broker's epmd) the hard way.
  pid="$(head -n1 "$DATA/postgres/data/postmaster.pid" 2>/dev/null || true)"
  if [[ -n $pid ]] && is_mine "$pid"; then
    kill -INT "$pid" 2>/dev/null || true
    wait_gone "$pid" 30 || true
  fi
  for pid in $(mine); do
    if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == beam.smp ]]; then
      kill -TERM "$pid" 2>/dev/null || true
      wait_gone "$pid" 30 || true
    fi
  done
  pids="$(mine)"
  # shellcheck disable=SC2086 # one pid a word
  [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
  rm -rf "$DATA"
}

print_env() {
  cat <<EOF
BOOKSTORE_CURRENT_ROOT=$ROOT
TEST_DATABASE_ADMIN_URL=postgres://postgres@127.0.0.1:$PG_PORT/postgres?sslmode=disable
TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:$AMQP_PORT/
TEST_RABBITMQ_MANAGEMENT_URL=http://guest:guest@127.0.0.1:$MANAGEMENT_PORT
EOF
}

# locked runs this script again with the same arguments holding the data directory's
# lock, unless it holds it already. --close: the servers started under it must not
# inherit the lock, or it would outlive the command.
locked() {
  if [[ -z ${BOOKSTORE_CURRENT_LOCKED:-} ]]; then
    mkdir -p "$(dirname "$DATA")"
    BOOKSTORE_CURRENT_LOCKED=1 exec flock --close "$DATA.lock" "$0" "$@"
  fi
}

[[ $(id -u) == 0 ]] || die "needs root (chroot and mount)"
cmd="${1:-}"
shift || true
case "$cmd" in
bootstrap)
  locked bootstrap
  bootstrap
  ;;
start)
  locked start
  start
  print_env
  ;;
stop)
  locked stop
  stop
  ;;
env) print_env ;;
serve) serve ;; # start's, inside its mount namespace
run)
  (($#)) || die "run: which command?"
  locked run "$@"
  trap stop EXIT
  trap 'exit 130' INT TERM
  start
  set -a
  eval "$(print_env)"
  set +a
  status=0
  "$@" || status=$?
  if ((status)); then
    say "the command failed ($status); the servers' logs end:"
    tail -n 15 "$DATA/postgres/postgres.log" "$DATA/rabbitmq/log/$NODE.log" >&2 2>/dev/null || true
  fi
  exit "$status"
  ;;
*) die "usage: servers.sh bootstrap|start|env|stop|run CMD..." ;;
esac
