#!/usr/bin/env bash
# `make run`: the four services and the storefront as plain processes on this machine, no Docker. The
# Makefile has already started Postgres and RabbitMQ (deploy/local/services.sh) and built
# bin/. Each service uses its defaults (localhost Postgres and RabbitMQ, ports 8081-8084 on
# 127.0.0.1 only); variables set in this shell (LOG_LEVEL=debug, OTEL_EXPORTER_OTLP_ENDPOINT,
# ...) reach all four. One more is set here: DATABASE_ADMIN_URL, the local superuser, so
# each service creates its own role and database on a fresh machine (the services' own
# default is empty: no superuser unless given one), given to the four services that own
# a database and not to the storefront. Set it empty to start without it. Every secret
# made here goes only to the process that uses it.
# And INVENTORY_ADMIN=1, which lets inventory take PUT /books/{id} (creating books and
# setting their stock; off by default): `make run` listens on loopback only and is where
# one tries the system out. INVENTORY_ADMIN=0 in this shell runs without it.
# The storefront (http://localhost:8080, printed first) reads the four services' APIs on
# their default ports. STOREFRONT_DEMOS=1 make run shows its break-it panel, and then also
# sets EMAILPROVIDER_ADMIN=1 unless this shell says otherwise, since a panel button
# changes the provider's faults; and it runs ordering's outbox relay as a process of its
# own, so another button can pause it alone: ordering with ORDERING_RELAY=0 (API and
# stock-events consumer), `ordering relay` beside it as ordering-relay (ordering's broker
# user, probes on 127.0.0.1:8091), and that process's pid to the storefront as
# STOREFRONT_RELAY_PID. Without demos the relay runs inside ordering's API process.
# And each broker client's AMQP_URL: ordering, inventory and notification log in to the
# local RabbitMQ as their own users, with the permissions deploy/rabbitmq/definitions.json
# gives them under docker compose too (services.sh creates them; the password is compose's,
# <user>-dev), on a virtual host of their own, RABBITMQ_VHOST (default bookstore), which
# this script prepares through RABBITMQ_MANAGEMENT_URL (rabbitmq-users.sh): the users'
# permissions and the policies there, no permission at all for guest, whose password
# everyone knows, and an administrator, <vhost>-admin, with a password made afresh for
# each run and printed below, as compose's broker has admin instead of guest. An AMQP_URL
# set in this shell goes to all of them instead, and the broker is left as it is. Likewise each
# service's DATABASE_URL names its role with compose's password, <service>-dev: the local
# Postgres trusts loopback and ignores it, compose's checks it (`make run SERVERS=compose`
# runs against compose's Postgres and RabbitMQ; docs/docker.md). Every log line is
# prefixed with its service's name. Ctrl-C stops them all.
#
# The storefront starts last, once the four services answer /readyz: its page reads
# inventory's books, and a newcomer's first screen should be the shop, not a refused
# connection.
#
# A service missing from bin/ is skipped with a note, so the system runs while a service
# is still being written. If one service exits, the others are stopped too: a half-running
# system that looks healthy is worse than a clear stop.
#
#   BIN_DIR        where the binaries are (default: bin/ of the repository)
#   READY_TIMEOUT  seconds to wait for every /readyz before printing the URLs (default 30)
set -uo pipefail

# `-`, not `:-`: DATABASE_ADMIN_URL= (set, empty) is kept, and the services then assume
# their roles and databases exist. Not exported: the services with a database get it,
# below, and the storefront does not.
database_admin_url="${DATABASE_ADMIN_URL-postgres://postgres@localhost:5432/postgres?sslmode=disable}"
unset DATABASE_ADMIN_URL
export INVENTORY_ADMIN="${INVENTORY_ADMIN:-1}"
# With traces sent somewhere (OTEL_EXPORTER_OTLP_ENDPOINT), the storefront links each
# step to its trace in a Jaeger on localhost:16686 unless JAEGER_URL says where.
if [[ -n ${OTEL_EXPORTER_OTLP_ENDPOINT-} ]]; then
  export JAEGER_URL="${JAEGER_URL:-http://localhost:16686}"
fi
demos=0
if [[ ${STOREFRONT_DEMOS:-0} == 1 ]]; then
  demos=1
  export EMAILPROVIDER_ADMIN="${EMAILPROVIDER_ADMIN:-1}"
fi

# The email provider answers only its callers, each with an API key of its own in account
# bookstore (32 hex characters, made afresh for each run) and the scopes it needs:
# notification sends and reads what it sent; the storefront only reads each order's
# email, and with demos on also sets the provider's faults (admin). The list goes to the
# provider alone, each key to its caller alone.
random_key() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }
notification_provider_key="$(random_key)"
storefront_provider_key="$(random_key)"
storefront_provider_scopes=read
if [[ $demos == 1 ]]; then
  storefront_provider_scopes=read,admin
fi
provider_api_keys="bookstore:$notification_provider_key:send,read,bookstore:$storefront_provider_key:$storefront_provider_scopes"
unset EMAILPROVIDER_API_KEYS EMAILPROVIDER_API_KEY

root="$(cd "$(dirname "$0")/../.." && pwd)"
bin_dir="${BIN_DIR:-$root/bin}"

# The services' vhost on the broker, unless this shell chose one AMQP_URL for all.
vhost=""
if [[ -z ${AMQP_URL+set} ]]; then
  vhost="${RABBITMQ_VHOST:-bookstore}"
  if [[ ! $vhost =~ ^[A-Za-z0-9._-]+$ ]]; then
    echo "RABBITMQ_VHOST=$vhost: want letters, digits, '.', '_' and '-' only" >&2
    exit 1
  fi
  broker_admin="$vhost-admin"
  broker_admin_password="$(random_key)"
  if ! RABBITMQ_VHOST="$vhost" RABBITMQ_ADMIN_USER="$broker_admin" RABBITMQ_ADMIN_PASSWORD="$broker_admin_password" \
    "$root/deploy/local/rabbitmq-users.sh"; then
    echo "could not prepare the services' vhost $vhost on the broker (RABBITMQ_MANAGEMENT_URL, see above)" >&2
    exit 1
  fi
fi
ready_timeout="${READY_TIMEOUT:-30}"
services=(ordering inventory notification emailprovider storefront)
ports=(8081 8082 8083 8084 8080)

names=()
pids=()
service_ports=()
relay_pid=""
storefront_vars=()
storefront_port=""

# prefix copies its input to stdout, each line led by the service's name. A plain read
# loop, not sed, so it works with macOS's bash 3.2 and BSD tools alike.
prefix() {
  local line
  while IFS= read -r line || [[ -n "$line" ]]; do
    printf '%-14s | %s\n' "$1" "$line"
  done
}

stopping=0
stop_all() {
  [[ $stopping == 1 ]] && return
  stopping=1
  echo "stopping ${names[*]:-nothing}" >&2
  local pid
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null
    # A relay the storefront's panel has paused (SIGSTOP) takes its TERM once continued.
    kill -CONT "$pid" 2>/dev/null
  done
  # The services drain in-flight requests and messages for up to 10 s on SIGTERM.
  local deadline=$((SECONDS + 15))
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null
  done
  wait 2>/dev/null
}
trap 'stop_all; exit 130' INT
trap 'stop_all; exit 143' TERM

# start runs one process in the background as name (its log prefix), listening on port,
# with env (NAME=value words, possibly none) and then the command line.
start() {
  local name="$1" port="$2"
  shift 2
  # The process substitution keeps $! the process's own pid, not the prefixer's.
  env "$@" > >(prefix "$name") 2>&1 &
  pids+=($!)
  names+=("$name")
  service_ports+=("$port")
}

for i in "${!services[@]}"; do
  name="${services[$i]}"
  if [[ ! -x "$bin_dir/$name" ]]; then
    echo "$name: $bin_dir/$name is not built yet, skipping it" >&2
    continue
  fi
  # Its own broker user unless the caller chose one URL for all; the email provider
  # and the storefront use no broker.
  vars=()
  if [[ -z ${AMQP_URL+set} && $name != emailprovider && $name != storefront ]]; then
    vars+=("AMQP_URL=amqp://$name:$name-dev@localhost:5672/$vhost")
  fi
  if [[ $name != storefront ]]; then
    vars+=("DATABASE_URL=postgres://$name:$name-dev@localhost:5432/$name?sslmode=disable")
    vars+=("DATABASE_ADMIN_URL=$database_admin_url")
  fi
  case $name in
  emailprovider) vars+=("EMAILPROVIDER_API_KEYS=$provider_api_keys") ;;
  notification) vars+=("EMAILPROVIDER_API_KEY=$notification_provider_key") ;;
  storefront) vars+=("EMAILPROVIDER_API_KEY=$storefront_provider_key") ;;
  esac
  if [[ $demos == 1 && $name == ordering ]]; then
    # The relay as a process of its own, which the storefront's panel can pause alone.
    start ordering "${ports[$i]}" ${vars[@]+"${vars[@]}"} ORDERING_RELAY=0 "$bin_dir/ordering"
    start ordering-relay 8091 ${vars[@]+"${vars[@]}"} ORDERING_RELAY=1 "$bin_dir/ordering" relay
    relay_pid=$!
    continue
  fi
  if [[ $name == storefront ]]; then
    storefront_vars=(${vars[@]+"${vars[@]}"}) storefront_port=${ports[$i]}
    if [[ -n $relay_pid ]]; then
      storefront_vars+=("STOREFRONT_RELAY_PID=$relay_pid")
    fi
    continue # started once the others are ready, below
  fi
  start "$name" "${ports[$i]}" ${vars[@]+"${vars[@]}"} "$bin_dir/$name"
done

# wait_ready waits until every process started from index $1 on answers /readyz
# (database and broker reachable), or the deadline passes. 127.0.0.1, not localhost: the
# services listen on IPv4 loopback only, and localhost may resolve to ::1 first.
deadline=$((SECONDS + ready_timeout))
wait_ready() {
  command -v curl >/dev/null || return 0
  local i
  for ((i = $1; i < ${#names[@]}; i++)); do
    until curl -fsS -o /dev/null --max-time 1 "http://127.0.0.1:${service_ports[$i]}/readyz" 2>/dev/null; do
      if ! kill -0 "${pids[$i]}" 2>/dev/null || ((SECONDS >= deadline)); then
        echo "${names[$i]} is not ready on port ${service_ports[$i]} (see its log lines above)" >&2
        break
      fi
      sleep 0.5
    done
  done
}

if ((${#pids[@]} > 0)); then
  echo "waiting for ${names[*]} to answer /readyz (up to ${ready_timeout} s)$([[ -x "$bin_dir/storefront" ]] && echo " before starting the storefront")" >&2
  wait_ready 0
fi
if [[ -x "$bin_dir/storefront" ]]; then
  first=${#names[@]}
  start storefront "$storefront_port" ${storefront_vars[@]+"${storefront_vars[@]}"} "$bin_dir/storefront"
  wait_ready "$first"
fi

if ((${#pids[@]} == 0)); then
  echo "no service binaries in $bin_dir: run make build" >&2
  exit 1
fi

# The services block of urls.sh; Jaeger, Grafana and the rest come with `make up`.
"$root/deploy/urls.sh" | sed -n '1,/^$/p'
# Its login: the services' vhost's administrator, made above; with one AMQP_URL for all,
# RABBITMQ_MANAGEMENT_URL's (admin / admin under SERVERS=compose), else guest's.
if [[ -n $vhost ]]; then
  echo "  RabbitMQ management   http://localhost:15672                ($broker_admin / $broker_admin_password; vhost $vhost, where the services log in as ordering, inventory, notification and guest may do nothing)"
else
  login="guest / guest"
  if [[ ${RABBITMQ_MANAGEMENT_URL-} == *://*:*@* ]]; then
    login="${RABBITMQ_MANAGEMENT_URL#*://}"
    login="${login%%@*}"
    login="${login%%:*} / ${login#*:}"
  fi
  echo "  RabbitMQ management   http://localhost:15672                ($login; every service logs in with this shell's AMQP_URL)"
fi
echo
echo "running: ${names[*]} (Ctrl-C stops them)"

# Until Ctrl-C, or until one of them exits on its own.
while true; do
  for i in "${!pids[@]}"; do
    if ! kill -0 "${pids[$i]}" 2>/dev/null; then
      wait "${pids[$i]}"
      code=$?
      echo "${names[$i]} exited with status $code" >&2
      stop_all
      exit 1
    fi
  done
  sleep 1
done
