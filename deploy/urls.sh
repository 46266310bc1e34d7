#!/usr/bin/env bash
# Prints where each part of Bookstore answers. The same addresses serve `make run`
# (native: the four services and the storefront) and `make up` (docker compose: everything).
# BOOKSTORE_HOST changes the host, e.g. for a remote Docker machine.
set -euo pipefail
host="${BOOKSTORE_HOST:-localhost}"

cat <<URLS
Bookstore
  storefront            http://${host}:8080                 (order a book and watch its journey)
  ordering API          http://${host}:8081/orders          (POST an order, GET /orders/{id})
  inventory API         http://${host}:8082/books
  notification API      http://${host}:8083/notifications?order_id={id}
  email provider API    http://${host}:8084/v1/emails?to={address}
  each service          /healthz  /readyz  /metrics  /openapi.yaml on its port

Around it (docker compose)
  RabbitMQ management   http://${host}:15672                (admin / admin)
  Jaeger (traces)       http://${host}:16686
  Prometheus            http://${host}:9090
  Grafana (dashboard)   http://${host}:3000/d/bookstore
  Mailpit (emails)      http://${host}:8025
  Swagger UI (APIs)     http://${host}:8090                 (the four OpenAPI documents, api/openapi)
  Toxiproxy API         http://${host}:8474                 (only with --profile chaos)
URLS
