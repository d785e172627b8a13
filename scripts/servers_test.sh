#!/usr/bin/env bash
# servers_test.sh checks how scripts/servers.sh edits rabbitmq-env.conf,
# against temporary copies (HERALD_RABBITMQ_ENV_CONF): no server is touched.
# scripts/test.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "servers_test: $*" >&2; exit 1; }

edit() { HERALD_RABBITMQ_ENV_CONF=$1 scripts/servers.sh rabbitmq-env 2>/dev/null; }

# value FILE NAME prints NAME as rabbitmq-server sees it: it sources the file.
value() { (set +u; . "$1"; eval "printf '%s' \"\${$2:-}\""); }

# Debian 12's rabbitmq-env.conf: every setting commented out.
debian=$tmp/debian.conf
cat >"$debian" <<'CONF'
# Defaults to rabbit. This can be useful if you want to run more than one node
# per machine - RABBITMQ_NODENAME should be unique per erlang-node-and-machine
# combination. See the clustering on a single machine guide for details:
# http://www.rabbitmq.com/clustering.html#single-machine
#NODENAME=rabbit

# By default RabbitMQ will bind to all interfaces, on IPv4 and IPv6 if
# available. Set this if you only want to bind to one network interface or#
# address family.
#NODE_IP_ADDRESS=127.0.0.1

# Defaults to 5672.
#NODE_PORT=5672
CONF
edit "$debian"
[ "$(value "$debian" NODE_IP_ADDRESS)" = 127.0.0.1 ] || fail "debian: NODE_IP_ADDRESS not 127.0.0.1: $(cat "$debian")"
# epmd and the distribution port are left alone: bound to 127.0.0.1 they
# stop the node from starting where the host name resolves to 127.0.1.1.
[ -z "$(value "$debian" ERL_EPMD_ADDRESS)" ] || fail "debian: ERL_EPMD_ADDRESS set"
[ -z "$(value "$debian" SERVER_ADDITIONAL_ERL_ARGS)" ] || fail "debian: SERVER_ADDITIONAL_ERL_ARGS set"
grep -q '^#NODE_IP_ADDRESS=127.0.0.1$' "$debian" || fail "debian: the commented line was changed"

# A second run adds nothing.
before=$(cat "$debian")
edit "$debian"
[ "$(cat "$debian")" = "$before" ] || fail "second run changed the file: $(cat "$debian")"

# Settings the user made are kept; only the missing ones are added.
own=$tmp/own.conf
printf '%s\n' 'NODE_IP_ADDRESS=10.0.0.5' 'export ERL_FLAGS="-kernel inet_dist_use_interface {10,0,0,5}"' >"$own"
edit "$own"
[ "$(value "$own" NODE_IP_ADDRESS)" = 10.0.0.5 ] || fail "own: NODE_IP_ADDRESS overridden"
[ "$(grep -c NODE_IP_ADDRESS "$own")" = 1 ] || fail "own: NODE_IP_ADDRESS written twice"

# The RABBITMQ_ form of a name counts.
pre=$tmp/prefixed.conf
echo 'RABBITMQ_NODE_IP_ADDRESS=127.0.0.1' >"$pre"
edit "$pre"
[ "$(grep -c NODE_IP_ADDRESS "$pre")" = 1 ] || fail "prefixed: NODE_IP_ADDRESS written again"

# No file yet: it is created.
new=$tmp/new.conf
edit "$new"
[ "$(value "$new" NODE_IP_ADDRESS)" = 127.0.0.1 ] || fail "new: NODE_IP_ADDRESS"

echo "servers_test: ok"
