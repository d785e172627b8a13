#!/usr/bin/env bash
# run.sh is the quick start: it brings up PostgreSQL and RabbitMQ (installing
# them from Debian's packages when missing), builds herald and the plugins,
# applies migrations, creates the demo tenant with its API key and directory,
# starts the local provider stand-ins (herald devpeers: SMTP, FCM, Twilio,
# Slack webhooks, and over TLS Web Push and APNs) and runs `herald serve`
# with examples/herald.hcl in the foreground.
#
# Everything a second terminal needs to talk to this herald (the config
# file, the variables the quickstart rules read, the demo API key and the
# demo tenant's HS256 token key) goes to .herald/quickstart.env (mode 0600,
# git-ignored):
#   source .herald/quickstart.env && bin/herald doctor
#
# Settings (env), each overriding examples/herald.hcl when given:
# HERALD_HTTP_LISTEN (127.0.0.1:8080), HERALD_HTTP_ADMIN_LISTEN
# (127.0.0.1:8081), HERALD_AMQP_URL (amqp://guest:guest@127.0.0.1:5672/;
# the websocket plugin of the quickstart rules uses it too),
# HERALD_DEMO_API_KEY (hk_demo_quickstart_key_0001).
set -euo pipefail
cd "$(dirname "$0")/.."

: "${HERALD_DEMO_API_KEY:=hk_demo_quickstart_key_0001}"
# examples/quickstart/rules.hcl reads the SMS auth token from here
# (auth_token = "env:HERALD_QUICKSTART_SMS_AUTH_TOKEN"); the dev peer takes
# any non-empty one.
export HERALD_QUICKSTART_SMS_AUTH_TOKEN=${HERALD_QUICKSTART_SMS_AUTH_TOKEN:-devpeer-dummy-auth-token}
export HERALD_CONFIG=${HERALD_CONFIG:-examples/herald.hcl}
# Absolute, so that the env file works from any directory.
HERALD_CONFIG=$(realpath "$HERALD_CONFIG")
# One broker URL for the daemon and for the websocket plugin, which the
# quickstart rules give amqp_url = "env:HERALD_AMQP_URL".
export HERALD_AMQP_URL=${HERALD_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}
# The listen addresses, here so that the URLs printed below are the ones
# herald serves.
export HERALD_HTTP_LISTEN=${HERALD_HTTP_LISTEN:-127.0.0.1:8080}
export HERALD_HTTP_ADMIN_LISTEN=${HERALD_HTTP_ADMIN_LISTEN:-127.0.0.1:8081}
# The base URL of the public API as a client on this machine reaches it:
# a wildcard listen address (":8080", "0.0.0.0:8080", "[::]:8080") is
# reached on loopback.
url_of() {
	local host=${1%:*} port=${1##*:}
	case $host in "" | 0.0.0.0 | "[::]") host=127.0.0.1 ;; esac
	echo "http://$host:$port"
}
HERALD_URL=$(url_of "$HERALD_HTTP_LISTEN")
admin_url=$(url_of "$HERALD_HTTP_ADMIN_LISTEN")
env_file=$PWD/.herald/quickstart.env
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
# The push plugin reads that CA itself, from inside its sandbox.
export HERALD_PLUGINS_SANDBOX_READ=$tls_dir
HERALD_QUICKSTART_VAPID_PUBLIC_KEY=$(cat "$tls_dir/vapid-public-key")
HERALD_QUICKSTART_VAPID_PRIVATE_KEY=$(cat "$tls_dir/vapid-private-key")
HERALD_QUICKSTART_APNS_KEY=$(cat "$tls_dir/apns-key.p8")
export HERALD_QUICKSTART_VAPID_PUBLIC_KEY HERALD_QUICKSTART_VAPID_PRIVATE_KEY HERALD_QUICKSTART_APNS_KEY
# Herald's database roles (herald_api, herald_worker, herald_admin,
# herald_producer; servers.sh made them already when it could act as the
# postgres superuser), and the logins of the API's and the superadmin's
# pools (examples/herald.hcl's api_url and admin_url), whose passwords go
# to .herald/db-logins.pgpass (mode 0600) and stay there on later runs.
mkdir -p -m 0700 .herald
bin/herald db roles
bin/herald migrate up
# quiet CMD...: runs CMD, showing what it writes to stderr only when it
# fails. The commands below print a key on stdout, which is kept for the
# env file and printed at the end, and a "shown once" note on stderr that
# would otherwise stand here with no key after it.
quiet() {
	local log
	log=$(mktemp -t herald-run.XXXXXX)
	if "$@" 2>"$log"; then
		rm -f "$log"
		return 0
	fi
	cat "$log" >&2
	rm -f "$log"
	return 1
}
api_key=$(quiet bin/herald apikeys create --tenant demo --name quickstart --key "$HERALD_DEMO_API_KEY" --insecure-dev-key)
bin/herald directory import --tenant demo examples/quickstart/directory.json

# The demo tenant's development HS256 token key, so that `herald tokens
# issue`, and a backend of yours in any language, can sign user tokens
# for the live walk-through (a production backend registers its own keys:
# herald tokens keys add --jwks ...). Its secret is shown once, when the
# key is made: the env file keeps it, and a later run reuses the key it
# names while the database has it. Without the secret (a database an
# earlier run set up, an env file removed) a new key is made beside the
# old one.
env_value() { # NAME: a one-line value of the env file a previous run wrote
	[ -f "$env_file" ] && sed -n "s/^export $1='\([^']*\)'\$/\1/p" "$env_file" | head -n 1
}
hs256_issuer=https://demo.invalid
hs256_kid=$(env_value HERALD_QUICKSTART_HS256_KID || true)
hs256_secret=$(env_value HERALD_QUICKSTART_HS256_SECRET || true)
token_keys=$(bin/herald tokens keys list --tenant demo)
if [ -z "$hs256_kid" ] || [ -z "$hs256_secret" ] || ! grep -Eq "^$hs256_kid +HS256 +active " <<<"$token_keys"; then
	hs256_kid=demo
	if grep -q '^demo ' <<<"$token_keys"; then
		hs256_kid=demo-$(date -u +%Y%m%d%H%M%S)
	fi
	hs256_secret=$(quiet bin/herald tokens keys add --tenant demo --kid "$hs256_kid" --issuer "$hs256_issuer" --generate-hs256)
fi

# The env file: what a second terminal sources to reach this herald with
# the CLI (doctor, rules check, events show, tokens issue) or curl, and
# what a backend of yours needs to sign demo tokens. Single-quoted values,
# so that any POSIX shell reads them back (the APNs key spans lines).
quote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
mkdir -p -m 0700 "$(dirname "$env_file")"
(
	umask 077
	written=
	{
		echo "# Written by scripts/run.sh at every start: source it in another terminal"
		echo "#   source .herald/quickstart.env"
		echo "# to run bin/herald doctor, bin/herald rules check, bin/herald events show ... against the quick start."
		for name in HERALD_CONFIG HERALD_AMQP_URL HERALD_HTTP_LISTEN HERALD_HTTP_ADMIN_LISTEN \
			HERALD_QUICKSTART_SMS_AUTH_TOKEN HERALD_QUICKSTART_CA_FILE HERALD_QUICKSTART_VAPID_PUBLIC_KEY \
			HERALD_QUICKSTART_VAPID_PRIVATE_KEY HERALD_QUICKSTART_APNS_KEY; do
			echo "export $name=$(quote "${!name}")"
			written+=" $name"
		done
		# Any other HERALD_* setting given to this script
		# (HERALD_DATABASE_URL, HERALD_LOG_LEVEL, ...).
		for name in $(compgen -e | grep '^HERALD_' | sort); do
			case " $written HERALD_URL HERALD_API_KEY " in
			*" $name "*) ;;
			*) echo "export $name=$(quote "${!name}")" ;;
			esac
		done
		echo "# The public API (herald events show reads HERALD_URL and HERALD_API_KEY)."
		echo "export HERALD_URL=$(quote "$HERALD_URL")"
		echo "export HERALD_API_KEY=$(quote "$api_key")"
		echo "# The demo tenant's HS256 token key: a backend signs user tokens (JWT, alg HS256,"
		echo "# header kid, claim iss) with the base64-DECODED bytes of the secret."
		echo "export HERALD_QUICKSTART_HS256_KID=$(quote "$hs256_kid")"
		echo "export HERALD_QUICKSTART_HS256_ISSUER=$(quote "$hs256_issuer")"
		echo "export HERALD_QUICKSTART_HS256_SECRET=$(quote "$hs256_secret")"
	} >"$env_file.tmp"
	chmod 0600 "$env_file.tmp"
	mv "$env_file.tmp" "$env_file"
)

# A token for staff1's web inbox, carried in the URL fragment (a fragment
# never reaches the server or its logs). It lasts 15 minutes, the longest
# auth.max_token_lifetime allows by default.
inbox_token=$(bin/herald tokens issue --tenant demo --kid "$hs256_kid" --user staff1 --user-type STAFF --roles MANAGER --ttl 15m)

cat >&2 <<MSG
run: herald is starting on $HERALD_URL (admin on $admin_url)
run: in another terminal, for bin/herald doctor, bin/herald rules check, bin/herald events show ...:
run:       source .herald/quickstart.env
run: web inbox of staff1 (the token lasts 15 minutes; a later one: bin/herald tokens issue --tenant demo --kid $hs256_kid --user staff1 --user-type STAFF --roles MANAGER --ttl 15m):
run:       $HERALD_URL/inbox#token=$inbox_token
run: demo tenant API key (HERALD_API_KEY in the env file): $api_key
run: demo tenant HS256 token key for your backend: kid $hs256_kid, issuer $hs256_issuer, secret (base64; sign with its decoded bytes):
run:       $hs256_secret
run:       (HERALD_QUICKSTART_HS256_KID, _ISSUER and _SECRET in .herald/quickstart.env, mode 0600)
run: superadmin view across tenants: bin/herald admins create   (prints a credential once), then
run:       curl -s -H "Authorization: Bearer <credential>" $HERALD_URL/v1/admin/stats
run: try:  curl -s -H "Authorization: Bearer $api_key" -H 'Content-Type: application/json' \\
             --data @examples/quickstart/reservation.json $HERALD_URL/v1/events
run: the devpeers lines above then show each message: smtp, fcm, twilio, "webpush accepted ...
run:       payload={...}" (decrypted), "apns accepted token=..." and "slack webhook posted hook=...".
MSG
bin/herald serve
