#!/usr/bin/env bash
# Starts Postgres and RabbitMQ on this machine if they are down, enables RabbitMQ's
# management plugin (the tests create one virtual host each through its API), waits
# until both answer, and gives the broker the services' own users with their permissions
# from deploy/rabbitmq/definitions.json (rabbitmq-users.sh; `make run` logs in as them).
# Safe to run any number of times.
set -euo pipefail

if ! pg_isready -q -h localhost -p 5432; then
  echo "starting Postgres" >&2
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
fi

rabbit_up() { rabbitmq-diagnostics -q check_port_connectivity >/dev/null 2>&1; }
if ! rabbit_up; then
  echo "starting RabbitMQ" >&2
  rabbitmq-server -detached
fi

for _ in $(seq 1 120); do
  if pg_isready -q -h localhost -p 5432 && rabbit_up; then break; fi
  sleep 1
done
pg_isready -h localhost -p 5432 >/dev/null || { echo "Postgres did not start" >&2; exit 1; }
rabbit_up || { echo "RabbitMQ did not start" >&2; exit 1; }

if ! curl -fsS -o /dev/null -u guest:guest http://localhost:15672/api/overview 2>/dev/null; then
  rabbitmq-plugins enable --quiet rabbitmq_management >/dev/null
  for _ in $(seq 1 60); do
    curl -fsS -o /dev/null -u guest:guest http://localhost:15672/api/overview 2>/dev/null && break
    sleep 1
  done
fi
curl -fsS -o /dev/null -u guest:guest http://localhost:15672/api/overview || { echo "RabbitMQ management API did not come up" >&2; exit 1; }

"$(dirname "$0")/rabbitmq-users.sh"
