#!/usr/bin/env bash
# servers_test.sh checks how scripts/servers.sh edits rabbitmq-env.conf,
# against temporary copies (HERALD_RABBITMQ_ENV_CONF): no server is touched.
# scripts/test.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "servers_test: $*" >&2; exit 1; }

# edit FILE [MNESIA] edits FILE as for a node whose data directory is
# MNESIA (default: one that holds data, so the node keeps its name).
held=$tmp/mnesia-held
mkdir -p "$held/rabbit@host"
edit() { HERALD_RABBITMQ_ENV_CONF=$1 HERALD_RABBITMQ_MNESIA=${2:-$held} scripts/servers.sh rabbitmq-env 2>/dev/null; }

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
cp "$debian" "$debian.orig"
edit "$debian"
[ "$(value "$debian" NODE_IP_ADDRESS)" = 127.0.0.1 ] || fail "debian: NODE_IP_ADDRESS not 127.0.0.1: $(cat "$debian")"
# A node that already holds data keeps its name, so epmd and the
# distribution port are left alone: bound to 127.0.0.1 they stop a node
# named after a host name that resolves to 127.0.1.1 from starting.
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

# A node with no data yet (a broker servers.sh installs): named
# rabbit@localhost, with epmd and the distribution port on loopback too.
fresh=$tmp/fresh.conf
cp "$debian.orig" "$fresh"
edit "$fresh" "$tmp/no-mnesia"
[ "$(value "$fresh" NODE_IP_ADDRESS)" = 127.0.0.1 ] || fail "fresh: NODE_IP_ADDRESS"
[ "$(value "$fresh" NODENAME)" = rabbit@localhost ] || fail "fresh: NODENAME: $(cat "$fresh")"
[ "$(value "$fresh" ERL_EPMD_ADDRESS)" = 127.0.0.1 ] || fail "fresh: ERL_EPMD_ADDRESS"
# ERL_EPMD_ADDRESS is read by epmd from the environment: it is exported.
[ "$( (set +u; . "$fresh"; sh -c 'printf %s "$ERL_EPMD_ADDRESS"') )" = 127.0.0.1 ] || fail "fresh: ERL_EPMD_ADDRESS not exported"
[ "$(value "$fresh" SERVER_ADDITIONAL_ERL_ARGS)" = "-kernel inet_dist_use_interface {127,0,0,1}" ] || fail "fresh: SERVER_ADDITIONAL_ERL_ARGS"
before=$(cat "$fresh")
edit "$fresh" "$tmp/no-mnesia"
[ "$(cat "$fresh")" = "$before" ] || fail "fresh: second run changed the file: $(cat "$fresh")"
# A node name the user chose keeps epmd and the distribution port as they are.
named=$tmp/named.conf
echo 'NODENAME=rabbit@myhost' >"$named"
edit "$named" "$tmp/no-mnesia"
[ "$(value "$named" NODENAME)" = rabbit@myhost ] || fail "named: NODENAME overridden"
[ -z "$(value "$named" ERL_EPMD_ADDRESS)" ] || fail "named: ERL_EPMD_ADDRESS set"

echo "servers_test: ok"
