// Package deploy holds no production code: its tests are the checks that keep the
// docker compose setup honest on a machine with no Docker engine.
//
// A compose file is only ever "tested" when someone runs it, usually a newcomer on day
// one, and the failures users of such demos report are always the same: a container with
// no healthcheck and services crash-looping while the broker boots, a script committed
// without its execute bit, a dashboard graphing a metric nobody exports, a definitions
// file whose queue arguments differ from the ones the services declare (and so a service
// that cannot start). Each test here closes one of them by checking the files against
// what really runs: the compose file as compose-go loads it, the Dockerfile as BuildKit
// parses it and its go build lines as they compile, the RabbitMQ definitions against the
// topology the services declare on a real broker, and the Grafana dashboard against the
// /metrics of the real service binaries.
package deploy
