#!/usr/bin/env bash
# servers.sh brings up the PostgreSQL and RabbitMQ servers Herald needs on
# loopback, reusing servers that already answer and installing (Debian's
# packages) and starting the ones that are missing. No systemd is needed.
#
#   scripts/servers.sh up       install if missing, start if stopped, create role and database
#   scripts/servers.sh status   say what answers
#   scripts/servers.sh stop     stop both servers
#   scripts/servers.sh reset    drop and recreate the herald database, delete herald's queues
#
# Settings (env): HERALD_PG_HOST (127.0.0.1), HERALD_PG_PORT (5432),
# HERALD_PG_USER (herald), HERALD_PG_PASSWORD (herald), HERALD_PG_DB (herald),
# HERALD_AMQP_HOST (127.0.0.1), HERALD_AMQP_PORT (5672),
# HERALD_RABBITMQ_ENV_CONF (/etc/rabbitmq/rabbitmq-env.conf, the file the
# broker this script starts reads its addresses from),
# HERALD_RABBITMQ_MNESIA (/var/lib/rabbitmq/mnesia: a node with data there
# keeps its name).
#
#   scripts/servers.sh rabbitmq-env   only write the loopback settings into
#                                     HERALD_RABBITMQ_ENV_CONF (what `up` does
#                                     before it starts a broker; for tests)
set -euo pipefail

PG_HOST=${HERALD_PG_HOST:-127.0.0.1}
PG_PORT=${HERALD_PG_PORT:-5432}
PG_USER=${HERALD_PG_USER:-herald}
PG_PASSWORD=${HERALD_PG_PASSWORD:-herald}
PG_DB=${HERALD_PG_DB:-herald}
AMQP_HOST=${HERALD_AMQP_HOST:-127.0.0.1}
AMQP_PORT=${HERALD_AMQP_PORT:-5672}
RABBITMQ_ENV_CONF=${HERALD_RABBITMQ_ENV_CONF:-/etc/rabbitmq/rabbitmq-env.conf}
RABBITMQ_MNESIA=${HERALD_RABBITMQ_MNESIA:-/var/lib/rabbitmq/mnesia}

log() { echo "servers: $*" >&2; }

as_root() {
	if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# apt_install PKG... (appends every apt-get run to /tmp/herald-apt.log).
. "$(dirname "$0")/tools.sh"

# as_postgres runs a shell command as the postgres user from /, a directory
# it can read: from root's working directory psql and createdb print
# "could not change directory" on every run.
as_postgres() { (cd / && su postgres -c "$1"); }

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

wait_for() { # wait_for SECONDS CMD...
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		if [ $SECONDS -ge $deadline ]; then return 1; fi
		sleep 0.5
	done
}

pg_answers() { pg_isready -q -h "$PG_HOST" -p "$PG_PORT" 2>/dev/null; }

ROLES_SQL="DO \$\$ DECLARE r text; BEGIN
  FOREACH r IN ARRAY ARRAY['herald_api', 'herald_worker', 'herald_admin', 'herald_producer'] LOOP
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN EXECUTE format('CREATE ROLE %I NOLOGIN', r); END IF;
  END LOOP;
  ALTER ROLE herald_worker BYPASSRLS;
  FOREACH r IN ARRAY ARRAY['herald_api', 'herald_worker', 'herald_admin'] LOOP
    IF NOT pg_has_role('$PG_USER', r, 'MEMBER') THEN EXECUTE format('GRANT %I TO %I', r, '$PG_USER'); END IF;
  END LOOP; END \$\$;"

pg_up() {
	if command -v pg_isready >/dev/null && pg_answers; then
		log "PostgreSQL answers on $PG_HOST:$PG_PORT (reused)"
	else
		if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
			apt_install postgresql
		fi
		local ver
		ver=$(ls /usr/lib/postgresql | sort -V | tail -1)
		if ! pg_lsclusters -h 2>/dev/null | awk '{print $1" "$2}' | grep -q "^$ver main$"; then
			as_root pg_createcluster "$ver" main -p "$PG_PORT" >/dev/null
		fi
		log "starting PostgreSQL $ver (cluster main)"
		as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
		wait_for 60 pg_answers || { log "PostgreSQL did not start"; exit 1; }
	fi
	# The herald role and database, created over the local socket as the postgres user.
	# CREATEROLE lets its migrations create Herald's group roles (herald_api,
	# herald_worker, herald_admin, herald_producer) and `herald db producer`
	# create producer login roles; it is not a superuser, so row-level
	# security applies to it.
	local sql="DO \$\$ BEGIN
	  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$PG_USER') THEN
	    CREATE ROLE \"$PG_USER\" LOGIN CREATEDB CREATEROLE PASSWORD '$PG_PASSWORD';
	  ELSE
	    ALTER ROLE \"$PG_USER\" CREATEROLE;
	  END IF; END \$\$;"
	if id postgres >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
		as_postgres "psql -q -p $PG_PORT -d postgres -v ON_ERROR_STOP=1" <<<"$sql" >/dev/null
		# Herald's group roles (migration 0007 makes them too, without
		# BYPASSRLS): herald_worker crosses tenants by design, and with
		# BYPASSRLS the relay may write deliveries with COPY, which
		# PostgreSQL refuses to a session that row-level security binds.
		as_postgres "psql -q -p $PG_PORT -d postgres -v ON_ERROR_STOP=1" <<<"$ROLES_SQL" >/dev/null
		if ! as_postgres "psql -tA -p $PG_PORT -d postgres -c \"SELECT 1 FROM pg_database WHERE datname = '$PG_DB'\"" | grep -q 1; then
			as_postgres "createdb -p $PG_PORT -O $PG_USER $PG_DB"
		fi
	else
		PGPASSWORD=$PG_PASSWORD psql -q -h "$PG_HOST" -p "$PG_PORT" -U "$PG_USER" -d postgres -c 'SELECT 1' >/dev/null ||
			{ log "cannot create role $PG_USER: run as root or create it yourself"; exit 1; }
		PGPASSWORD=$PG_PASSWORD psql -q -h "$PG_HOST" -p "$PG_PORT" -U "$PG_USER" -d postgres -tA \
			-c "SELECT 1 FROM pg_database WHERE datname = '$PG_DB'" | grep -q 1 ||
			PGPASSWORD=$PG_PASSWORD createdb -h "$PG_HOST" -p "$PG_PORT" -U "$PG_USER" "$PG_DB"
	fi
	log "PostgreSQL ready: postgres://$PG_USER:***@$PG_HOST:$PG_PORT/$PG_DB"
}

rabbit_answers() { port_open "$AMQP_HOST" "$AMQP_PORT"; }

# env_set FILE NAME matches an uncommented assignment of NAME or
# RABBITMQ_NAME (Debian ships the file with every line commented out, e.g.
# "#NODE_IP_ADDRESS=127.0.0.1", and a commented line sets nothing).
env_set() {
	grep -Eqs "^[[:space:]]*(export[[:space:]]+)?(RABBITMQ_)?$2=" "$1"
}

# rabbit_env_loopback makes the broker started from rabbitmq-server listen
# on loopback only: rabbitmq-server 3.10 sources rabbitmq-env.conf as a
# shell file. NODE_IP_ADDRESS sets the AMQP listener (*:5672 when unset). A
# node that holds no data yet (a broker this script installs) is also named
# rabbit@localhost, with epmd (ERL_EPMD_ADDRESS) and the distribution port
# (inet_dist_use_interface) on 127.0.0.1: the name matters, because
# Debian's /etc/hosts maps the host name a node is named after by default
# to 127.0.1.1, where a node bound to 127.0.0.1 cannot reach its own epmd.
# A node that already holds data (HERALD_RABBITMQ_MNESIA, Debian's
# /var/lib/rabbitmq/mnesia) keeps its name, so epmd and the distribution
# port stay on every address there. A setting the file already makes
# (uncommented) is left alone, and so is the node's name and epmd when the
# file names either.
rabbit_env_loopback() {
	local f=$RABBITMQ_ENV_CONF add=""
	env_set "$f" NODE_IP_ADDRESS || add+=$'NODE_IP_ADDRESS=127.0.0.1\n'
	if [ -z "$(ls -A "$RABBITMQ_MNESIA" 2>/dev/null)" ] &&
		! env_set "$f" NODENAME && ! env_set "$f" ERL_EPMD_ADDRESS &&
		! env_set "$f" SERVER_ADDITIONAL_ERL_ARGS; then
		add+=$'NODENAME=rabbit@localhost\n'
		add+=$'export ERL_EPMD_ADDRESS=127.0.0.1\n'
		add+=$'SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"\n'
	fi
	if [ -z "$add" ]; then
		return
	fi
	log "binding RabbitMQ to 127.0.0.1 in $f"
	add=$'# Added by Herald\'s scripts/servers.sh: listen on loopback only.\n'$add
	if [ -w "$f" ] || { [ ! -e "$f" ] && [ -w "$(dirname "$f")" ]; }; then
		printf '%s' "$add" >>"$f"
	else
		printf '%s' "$add" | as_root tee -a "$f" >/dev/null
	fi
}

rabbit_up() {
	if rabbit_answers; then
		log "RabbitMQ answers on $AMQP_HOST:$AMQP_PORT (reused)"
		return
	fi
	if ! command -v rabbitmq-server >/dev/null; then
		apt_install rabbitmq-server
	fi
	if [ -d "$(dirname "$RABBITMQ_ENV_CONF")" ]; then
		rabbit_env_loopback
	fi
	log "starting RabbitMQ"
	as_root rabbitmq-server -detached >/dev/null 2>&1 || true
	wait_for 120 rabbit_answers || { log "RabbitMQ did not start"; exit 1; }
	as_root rabbitmqctl -q await_startup --timeout 120 >/dev/null 2>&1 || true
	log "RabbitMQ ready: amqp://guest:***@$AMQP_HOST:$AMQP_PORT/"
}

case "${1:-up}" in
up)
	pg_up
	rabbit_up
	;;
rabbitmq-env)
	rabbit_env_loopback
	;;
status)
	if pg_answers; then echo "postgresql: up ($PG_HOST:$PG_PORT)"; else echo "postgresql: down"; fi
	if rabbit_answers; then echo "rabbitmq: up ($AMQP_HOST:$AMQP_PORT)"; else echo "rabbitmq: down"; fi
	;;
stop)
	if rabbit_answers; then as_root rabbitmqctl -q stop || true; fi
	if pg_answers; then
		ver=$(ls /usr/lib/postgresql | sort -V | tail -1)
		as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main stop || true
	fi
	;;
reset)
	pg_up
	rabbit_up
	as_postgres "dropdb -p $PG_PORT --if-exists --force $PG_DB" && as_postgres "createdb -p $PG_PORT -O $PG_USER $PG_DB"
	for q in $(as_root rabbitmqctl -q list_queues name 2>/dev/null | grep '^herald\.' || true); do
		as_root rabbitmqctl -q delete_queue "$q" >/dev/null
	done
	log "reset done"
	;;
*)
	echo "usage: $0 up|status|stop|reset|rabbitmq-env" >&2
	exit 2
	;;
esac
