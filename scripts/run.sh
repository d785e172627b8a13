#!/usr/bin/env bash
# run.sh is the quick start: it brings up PostgreSQL and RabbitMQ (installing
# them from Debian's packages when missing), builds herald and the plugins,
# applies migrations, creates the demo tenant with its API key and directory,
# starts the local provider stand-ins (herald devpeers) and runs
# `herald serve` with examples/herald.hcl in the foreground.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${HERALD_DEMO_API_KEY:=hk_demo_quickstart_key_0001}"
# examples/quickstart/rules.hcl reads the SMS auth token from here
# (auth_token = "env:HERALD_QUICKSTART_SMS_AUTH_TOKEN"); the dev peer takes
# any non-empty one.
export HERALD_QUICKSTART_SMS_AUTH_TOKEN=${HERALD_QUICKSTART_SMS_AUTH_TOKEN:-devpeer-dummy-auth-token}
export HERALD_CONFIG=${HERALD_CONFIG:-examples/herald.hcl}

scripts/servers.sh up
echo "run: building herald and the plugins (one line per binary)" >&2
make --no-print-directory build
# Herald's database roles (herald_api, herald_worker, herald_admin,
# herald_producer); servers.sh made them already when it could act as the
# postgres superuser, and this is a no-op then.
bin/herald db roles
bin/herald migrate up
bin/herald apikeys create --tenant demo --name quickstart --key "$HERALD_DEMO_API_KEY" --insecure-dev-key >/dev/null
bin/herald directory import --tenant demo examples/quickstart/directory.json
# The demo tenant's development token key, so that `herald tokens issue`
# can sign user tokens for the live walk-through (a production backend
# registers its own keys: herald tokens keys add --jwks ...).
if ! bin/herald tokens keys list --tenant demo | grep -q '^demo '; then
	bin/herald tokens keys add --tenant demo --kid demo --issuer https://demo.invalid --generate-hs256 >/dev/null
fi

bin/herald devpeers --smtp 127.0.0.1:2525 --http 127.0.0.1:4010 &
peers=$!
trap 'kill $peers 2>/dev/null || true' EXIT

# A token for staff1's web inbox, carried in the URL fragment (a fragment
# never reaches the server or its logs). It lasts 15 minutes, the longest
# auth.max_token_lifetime allows by default.
inbox_token=$(bin/herald tokens issue --tenant demo --kid demo --user staff1 --user-type STAFF --roles MANAGER --ttl 15m)

cat >&2 <<MSG
run: herald is starting on http://127.0.0.1:8080 (admin on 127.0.0.1:8081)
run: web inbox of staff1 (the token lasts 15 minutes; a later one: bin/herald tokens issue --tenant demo --kid demo --user staff1 --user-type STAFF --roles MANAGER --ttl 15m):
run:       http://127.0.0.1:8080/inbox#token=$inbox_token
run: demo tenant API key: $HERALD_DEMO_API_KEY
run: superadmin view across tenants: bin/herald admins create   (prints a credential once), then
run:       curl -s -H "Authorization: Bearer <credential>" http://127.0.0.1:8080/v1/admin/stats
run: try:  curl -s -H "Authorization: Bearer $HERALD_DEMO_API_KEY" -H 'Content-Type: application/json' \\
             --data @examples/quickstart/reservation.json http://127.0.0.1:8080/v1/events
MSG
bin/herald serve
