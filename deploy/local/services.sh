#!/usr/bin/env bash
# Makes sure Postgres (localhost:5432) and RabbitMQ (localhost:5672, management on :15672)
# answer, for `make run`, `make demo` and the tests. Safe to run any number of times.
#
# Servers that already answer are used as they are, whoever started them: this machine's
# own, or docker compose's (`docker compose up -d postgres rabbitmq`, whose credentials
# `make demo SERVERS=compose` passes on; docs/docker.md). Only what is down is started, and
# only with Debian's tools (pg_ctlcluster, rabbitmq-server); without them the script says
# which compose command starts the servers instead, and stops.
#
# Once the broker's management API answers, the services' own users get their permissions
# from deploy/rabbitmq/definitions.json (rabbitmq-users.sh; `make run` logs in as them),
# through RABBITMQ_MANAGEMENT_URL (default http://guest:guest@localhost:15672; compose's
# broker has no guest: its admin is admin/admin).
#
# Port checks go through bash's /dev/tcp, so nothing but bash and curl is needed on a
# machine whose servers run in containers (macOS included).
set -euo pipefail

export RABBITMQ_MANAGEMENT_URL="${RABBITMQ_MANAGEMENT_URL:-http://guest:guest@localhost:15672}"
compose_hint="docker compose up -d --wait postgres rabbitmq"

# answers says whether something accepts TCP connections on the local port.
answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# postgres_up says whether Postgres takes connections: pg_isready where there is one (a
# server still recovering has its port open already), the port otherwise.
postgres_up() {
  if command -v pg_isready >/dev/null; then pg_isready -q -h localhost -p 5432; else answers 5432; fi
}

# cannot_start explains that what is down cannot be started here, and how to get it.
cannot_start() {
  cat >&2 <<EOF
$1 does not answer on localhost:$2, and this machine has no $3 to start it.
Start Postgres and RabbitMQ with docker compose from the repository's root:

  $compose_hint

then run this again with compose's credentials, e.g. make demo SERVERS=compose
(docs/docker.md#running-the-demos-against-composes-servers).
EOF
  exit 1
}

if postgres_up && answers 5672 && answers 15672; then
  echo "Postgres and RabbitMQ already answer on localhost:5432, :5672 and :15672: using them, starting nothing" >&2
else
  if ! postgres_up; then
    command -v pg_ctlcluster >/dev/null || cannot_start Postgres 5432 pg_ctlcluster
    echo "starting Postgres" >&2
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
  fi
  if ! answers 5672; then
    command -v rabbitmq-server >/dev/null || cannot_start RabbitMQ 5672 rabbitmq-server
    echo "starting RabbitMQ" >&2
    rabbitmq-server -detached
  fi
  for _ in $(seq 1 120); do
    if postgres_up && answers 5672; then break; fi
    sleep 1
  done
  postgres_up || { echo "Postgres did not start" >&2; exit 1; }
  answers 5672 || { echo "RabbitMQ did not start" >&2; exit 1; }
  if ! answers 15672; then
    command -v rabbitmq-plugins >/dev/null || cannot_start "RabbitMQ's management API" 15672 rabbitmq-plugins
    rabbitmq-plugins enable --quiet rabbitmq_management >/dev/null
    for _ in $(seq 1 60); do
      answers 15672 && break
      sleep 1
    done
  fi
fi

# The management API, with RABBITMQ_MANAGEMENT_URL's credentials. A broker that starts
# accepts connections a moment before its API does: give it a minute.
api="${RABBITMQ_MANAGEMENT_URL%/}/api/overview"
for _ in $(seq 1 60); do
  code="$(curl -sS -o /dev/null -w '%{http_code}' --max-time 5 "$api" 2>/dev/null || true)"
  [[ $code == 200 || $code == 401 ]] && break
  sleep 1
done
case "$code" in
200) ;;
401)
  cat >&2 <<EOF
RabbitMQ's management API on :15672 refuses RABBITMQ_MANAGEMENT_URL's credentials. Compose's
broker has no guest user; its administrator is admin/admin: run make with SERVERS=compose,
or set RABBITMQ_MANAGEMENT_URL=http://admin:admin@localhost:15672
EOF
  exit 1
  ;;
*)
  echo "RabbitMQ management API did not come up on :15672 (last answer: ${code:-none})" >&2
  exit 1
  ;;
esac

"$(dirname "$0")/rabbitmq-users.sh"
