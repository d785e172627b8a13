#!/usr/bin/env bash
# run.sh is the quick start: it brings up PostgreSQL and RabbitMQ (installing
# them from Debian's packages when missing), builds herald and the plugins,
# applies migrations, creates the demo tenant with its API key and directory,
# starts the local provider stand-ins (herald devpeers: SMTP, FCM, Twilio,
# Slack webhooks, and over TLS Web Push and APNs) and runs `herald serve`
# with examples/herald.hcl in the foreground.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${HERALD_DEMO_API_KEY:=hk_demo_quickstart_key_0001}"
# examples/quickstart/rules.hcl reads the SMS auth token from here
# (auth_token = "env:HERALD_QUICKSTART_SMS_AUTH_TOKEN"); the dev peer takes
# any non-empty one.
export HERALD_QUICKSTART_SMS_AUTH_TOKEN=${HERALD_QUICKSTART_SMS_AUTH_TOKEN:-devpeer-dummy-auth-token}
export HERALD_CONFIG=${HERALD_CONFIG:-examples/herald.hcl}
# herald devpeers' TLS peer (Web Push, APNs) writes its CA and throw-away
# VAPID and APNs keys here at every start (git ignores the directory); the
# quickstart rules read the CA's path and the keys from the
# HERALD_QUICKSTART_* variables exported below once the peers are up.
tls_dir=$PWD/examples/quickstart/.devpeers

scripts/servers.sh up
echo "run: building herald and the plugins (one line per binary)" >&2
make --no-print-directory build

# The provider stand-ins, first: the rules herald serve loads read the
# keys they write. Their output (one line per message they receive) goes to
# this terminal and to a log, from which we learn that they are up.
peers_log=$(mktemp -t herald-devpeers.XXXXXX)
bin/herald devpeers --smtp 127.0.0.1:2525 --http 127.0.0.1:4010 \
	--tls 127.0.0.1:4443 --tls-dir "$tls_dir" > >(tee "$peers_log") &
peers=$!
trap 'kill $peers 2>/dev/null || true; rm -f "$peers_log"' EXIT
deadline=$((SECONDS + 30))
until grep -q '^waiting for messages' "$peers_log"; do
	if ! kill -0 "$peers" 2>/dev/null; then
		echo "run: herald devpeers exited (is another one still running on 2525, 4010 or 4443?)" >&2
		exit 1
	fi
	if ((SECONDS >= deadline)); then
		echo "run: herald devpeers did not start within 30s" >&2
		exit 1
	fi
	sleep 0.2
done
echo "run: provider stand-ins up; Web Push/APNs CA and dev keys in $tls_dir" >&2
export HERALD_QUICKSTART_CA_FILE=$tls_dir/ca.pem
HERALD_QUICKSTART_VAPID_PUBLIC_KEY=$(cat "$tls_dir/vapid-public-key")
HERALD_QUICKSTART_VAPID_PRIVATE_KEY=$(cat "$tls_dir/vapid-private-key")
HERALD_QUICKSTART_APNS_KEY=$(cat "$tls_dir/apns-key.p8")
export HERALD_QUICKSTART_VAPID_PUBLIC_KEY HERALD_QUICKSTART_VAPID_PRIVATE_KEY HERALD_QUICKSTART_APNS_KEY
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
run: the devpeers lines above then show each message: smtp, fcm, twilio, "webpush accepted ...
run:       payload={...}" (decrypted), "apns accepted token=..." and "slack webhook posted hook=...".
MSG
bin/herald serve
