#!/usr/bin/env bash
# Gives the local RabbitMQ the service users and the policies of
# deploy/rabbitmq/definitions.json, as docker compose's broker has them: ordering, inventory and notification, each with the
# file's password hash and exactly its permissions and topic permissions on the default
# vhost "/". The file stays the one source of truth: nothing here names a queue or a
# permission. `make run` logs each service in as its user (deploy/local/run.sh); the
# password is the one docker-compose.yml's AMQP_URL gives it, <user>-dev.
#
# Safe to run any number of times: each user, permission and topic permission is written
# (PUT) through the management API, replacing what was there. Nothing else is touched:
# not guest, which the tests use, not the file's admin user, not the topology, which each
# service declares itself. The file's policies are written likewise. Called by
# deploy/local/services.sh once the API answers.
#
#   RABBITMQ_MANAGEMENT_URL  the management API with its credentials
#                            (default http://guest:guest@localhost:15672)
#   RABBITMQ_VHOST           the virtual host to give the users (default "/", the file's);
#                            another is created if missing, and guest has no permission
#                            on it (`make run`'s vhost, deploy/local/run.sh)
#   RABBITMQ_ADMIN_USER, RABBITMQ_ADMIN_PASSWORD
#                            with RABBITMQ_VHOST: an administrator to create (or whose
#                            password to replace), with every permission on that vhost
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
export DEFINITIONS="${DEFINITIONS:-$root/deploy/rabbitmq/definitions.json}"
export RABBITMQ_MANAGEMENT_URL="${RABBITMQ_MANAGEMENT_URL:-http://guest:guest@localhost:15672}"

exec python3 - <<'PY'
import base64, json, os, sys, urllib.error, urllib.parse, urllib.request

SERVICES = ("ordering", "inventory", "notification")  # the email provider uses no broker
FILE_VHOST = "/"  # the definitions file's
VHOST = os.environ.get("RABBITMQ_VHOST") or FILE_VHOST

with open(os.environ["DEFINITIONS"]) as f:
    d = json.load(f)
api = urllib.parse.urlsplit(os.environ["RABBITMQ_MANAGEMENT_URL"])
auth = base64.b64encode(f"{urllib.parse.unquote(api.username or '')}:{urllib.parse.unquote(api.password or '')}".encode()).decode()
base = f"{api.scheme}://{api.hostname}:{api.port or 15672}{api.path.rstrip('/')}/api"

def call(method, path, body=None, missing_ok=False):
    req = urllib.request.Request(base + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": "Basic " + auth})
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            out = r.read()
            return json.loads(out) if out else None
    except urllib.error.HTTPError as e:
        if missing_ok and e.code == 404:
            return None
        sys.exit(f"rabbitmq-users: {method} {path}: {e.code} {e.read().decode(errors='replace')}")
    except OSError as e:
        sys.exit(f"rabbitmq-users: {method} {path}: {e}")

put = lambda path, body: call("PUT", path, body)

q = lambda s: urllib.parse.quote(s, safe="")
if VHOST != FILE_VHOST:
    put(f"/vhosts/{q(VHOST)}", {})
users = {u["name"]: u for u in d["users"]}
for name in SERVICES:
    if name not in users:
        sys.exit(f"rabbitmq-users: no user {name} in {os.environ['DEFINITIONS']}")
    u = users[name]
    put(f"/users/{q(name)}", {"password_hash": u["password_hash"],
                              "hashing_algorithm": u["hashing_algorithm"],
                              "tags": ",".join(u.get("tags", []))})
    perms = [p for p in d.get("permissions", []) if p["user"] == name and p["vhost"] == FILE_VHOST]
    if len(perms) != 1:
        sys.exit(f"rabbitmq-users: {len(perms)} permission entries for {name} on {VHOST}, want 1")
    p = perms[0]
    put(f"/permissions/{q(VHOST)}/{q(name)}",
        {"configure": p["configure"], "write": p["write"], "read": p["read"]})
    # Exactly the file's topic permissions: the API deletes a user's topic permissions on
    # a vhost only all at once, so an exchange the file no longer names clears them first.
    want = {tp["exchange"]: {"exchange": tp["exchange"], "write": tp["write"], "read": tp["read"]}
            for tp in d.get("topic_permissions", []) if tp["user"] == name and tp["vhost"] == FILE_VHOST}
    path = f"/topic-permissions/{q(VHOST)}/{q(name)}"
    have = call("GET", path, missing_ok=True) or []
    if any(tp["exchange"] not in want for tp in have):
        call("DELETE", path, missing_ok=True)
    for body in want.values():
        put(path, body)

# The file's policies on the vhost (the dead-letter queues' delivery limit), as compose's
# broker imports them.
for pol in d.get("policies", []):
    if pol["vhost"] == FILE_VHOST:
        put(f"/policies/{q(VHOST)}/{q(pol['name'])}",
            {k: pol[k] for k in ("pattern", "apply-to", "priority", "definition")})

# A vhost of its own (`make run`'s): no guest, whose password everyone knows, and an
# administrator of the caller's, as compose's broker has admin instead of guest.
if VHOST != FILE_VHOST:
    call("DELETE", f"/permissions/{q(VHOST)}/guest", missing_ok=True)
    call("DELETE", f"/topic-permissions/{q(VHOST)}/guest", missing_ok=True)
    admin, password = os.environ.get("RABBITMQ_ADMIN_USER"), os.environ.get("RABBITMQ_ADMIN_PASSWORD")
    if admin:
        if not password:
            sys.exit("rabbitmq-users: RABBITMQ_ADMIN_USER without RABBITMQ_ADMIN_PASSWORD")
        put(f"/users/{q(admin)}", {"password": password, "tags": "administrator"})
        put(f"/permissions/{q(VHOST)}/{q(admin)}", {"configure": ".*", "write": ".*", "read": ".*"})
PY
