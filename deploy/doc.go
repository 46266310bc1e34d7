// Package deploy holds no production code: its tests check docker compose, deploy/'s
// scripts and configuration against what really runs, on a machine with no Docker engine.
// Each closes a failure a newcomer meets on day one: a container with no healthcheck, a
// script without its execute bit, a dashboard graphing a metric nobody exports, a
// definitions file whose queue arguments differ from the services' own. They read the
// compose file as compose-go loads it, the Dockerfile as BuildKit parses it, the RabbitMQ
// definitions against the topology declared on a real broker, and the dashboard against
// the real binaries' /metrics; `make run`'s script runs on stand-in processes.
package deploy
