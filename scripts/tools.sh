#!/usr/bin/env bash
# tools.sh installs, from Debian's packages, the tools Herald's scripts need
# when they are missing; make check, scripts/test.sh and scripts/servers.sh
# share it.
#
#   scripts/tools.sh protoc     protoc and the well-known .proto files it imports
#   scripts/tools.sh chromium   Chromium, for the web inbox's end-to-end test
#   scripts/tools.sh python-grpc  Debian's python3 with grpcio and protobuf,
#                               and openssl, for the Python plugin example
#   scripts/tools.sh typescript  TypeScript's tsc from the npm registry (pinned
#                               version, into HERALD_TS_DIR), for the inbox
#                               component's type declarations
#   scripts/tools.sh podman     podman and runc, for the container image's test
#                               (core/integration/image_test.go)
#   scripts/tools.sh producer-langs  the runtimes and PostgreSQL drivers of
#                               the producer examples (examples/producers):
#                               a JDK and JDBC, PHP and PDO, python3 and
#                               psycopg, nodejs and node-postgres
#
# Sourced, it only defines apt_install. Every apt-get run appends to
# HERALD_APT_LOG (/tmp/herald-apt.log), so a failed install's log survives
# the next one.
set -euo pipefail

HERALD_APT_LOG=${HERALD_APT_LOG:-/tmp/herald-apt.log}

# apt_install PKG... installs the packages as root (through sudo when not
# root), running apt-get update first only when the install fails. It
# waits up to 5 minutes for another apt or dpkg run to release its lock
# (unattended upgrades, a second script installing at the same time).
apt_install() {
	echo "tools: installing $* from Debian's packages (log: $HERALD_APT_LOG)" >&2
	local sudo=() wait=(-o DPkg::Lock::Timeout=300)
	if [ "$(id -u)" != 0 ]; then sudo=(sudo); fi
	export DEBIAN_FRONTEND=noninteractive
	echo "== $(date -u +%FT%TZ) apt-get install $*" >>"$HERALD_APT_LOG"
	if ! "${sudo[@]}" apt-get "${wait[@]}" install -y --no-install-recommends "$@" >>"$HERALD_APT_LOG" 2>&1; then
		"${sudo[@]}" apt-get "${wait[@]}" update >>"$HERALD_APT_LOG" 2>&1
		"${sudo[@]}" apt-get "${wait[@]}" install -y --no-install-recommends "$@" >>"$HERALD_APT_LOG" 2>&1 || {
			tail -20 "$HERALD_APT_LOG" >&2
			return 1
		}
	fi
}

# can_install says whether apt_install can work here.
can_install() {
	command -v apt-get >/dev/null && { [ "$(id -u)" = 0 ] || command -v sudo >/dev/null; }
}

# protoc and the well-known .proto files it imports (google/protobuf/*.proto
# ship in libprotobuf-dev, which protobuf-compiler only recommends).
tool_protoc() {
	if command -v protoc >/dev/null && [ -f /usr/include/google/protobuf/duration.proto ]; then
		return
	fi
	if can_install; then
		apt_install protobuf-compiler libprotobuf-dev
	else
		echo "tools: protoc missing (Debian: apt-get install protobuf-compiler libprotobuf-dev)" >&2
		return 1
	fi
}

# Chromium drives the web inbox's end-to-end test (core/integration/
# webinbox_test.go), which fails without it; HERALD_CHROMIUM names another.
tool_chromium() {
	if [ -n "${HERALD_CHROMIUM:-}" ] || [ -x /usr/bin/chromium ]; then
		return
	fi
	if can_install; then
		apt_install chromium
	else
		echo "tools: chromium missing (Debian: apt-get install chromium, or set HERALD_CHROMIUM)" >&2
		return 1
	fi
}

# The Python channel plugin (examples/plugins/telegram) runs on Debian's
# /usr/bin/python3 with python3-grpcio and python3-protobuf; it makes its
# TLS certificate with the openssl command.
tool_python_grpc() {
	if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null &&
		command -v openssl >/dev/null; then
		return
	fi
	if can_install; then
		apt_install python3 python3-grpcio python3-protobuf openssl
	else
		echo "tools: python3-grpcio missing (Debian: apt-get install python3-grpcio python3-protobuf openssl)" >&2
		return 1
	fi
}

# podman runs the container image in its test (core/integration's
# TestContainerImage); runc beside it, since Debian's default runtime, crun,
# refuses a machine whose cgroups are a v1/v2 hybrid.
tool_podman() {
	if command -v podman >/dev/null && command -v runc >/dev/null; then
		return
	fi
	if can_install; then
		apt_install podman runc
	else
		echo "tools: podman missing (Debian: apt-get install podman runc)" >&2
		return 1
	fi
}

# The producer examples (examples/producers, run by core/integration's
# TestProducerExamplesInEveryLanguage) run on Debian's runtimes and drivers.
# Each language is installed on its own, so one that fails does not keep the
# others out; the status is 1 when any is still missing.
tool_producer_langs() {
	local missing=() failed=0
	if ! command -v javac >/dev/null || [ ! -f /usr/share/java/postgresql.jar ]; then
		missing+=("default-jdk-headless libpostgresql-jdbc-java")
	fi
	if ! php -r 'exit(extension_loaded("pdo_pgsql") ? 0 : 1);' 2>/dev/null; then
		missing+=("php-cli php-pgsql")
	fi
	if ! /usr/bin/python3 -c 'import psycopg' 2>/dev/null; then
		missing+=("python3 python3-psycopg")
	fi
	if ! NODE_PATH=$(node_pg_path) node -e 'require.resolve("pg")' 2>/dev/null; then
		missing+=("nodejs node-pg")
	fi
	local pkgs
	for pkgs in "${missing[@]}"; do
		# shellcheck disable=SC2086 # one word per package
		if can_install && apt_install $pkgs; then
			continue
		fi
		if [ "$pkgs" = "nodejs node-pg" ] && command -v node >/dev/null && can_install && unpack_node_pg; then
			continue
		fi
		echo "tools: $pkgs missing (Debian: apt-get install $pkgs)" >&2
		failed=1
	done
	return $failed
}

# HERALD_NODE_PG_DIR is where unpack_node_pg puts node-pg for a nodejs that
# is not Debian's; the test looks there too.
HERALD_NODE_PG_DIR=${HERALD_NODE_PG_DIR:-/var/cache/herald/node-pg}

# node_pg_path is the NODE_PATH that finds Debian's node modules.
node_pg_path() {
	echo "$HERALD_NODE_PG_DIR/usr/share/nodejs:/usr/share/nodejs:/usr/lib/nodejs"
}

# unpack_node_pg unpacks Debian's node-pg and the modules it needs into
# HERALD_NODE_PG_DIR, without installing them: Debian's node-pg depends on
# Debian's nodejs, which apt will not put in place of another build (a
# nodejs from another repository, as some machines have).
unpack_node_pg() {
	echo "tools: nodejs is not Debian's; unpacking node-pg into $HERALD_NODE_PG_DIR" >&2
	local tmp pkgs
	tmp=$(mktemp -d)
	pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
		--no-replaces --no-enhances node-pg | grep '^node-' | sort -u) || { rm -rf "$tmp"; return 1; }
	# shellcheck disable=SC2086 # one word per package
	(cd "$tmp" && apt-get download $pkgs >>"$HERALD_APT_LOG" 2>&1) || { rm -rf "$tmp"; return 1; }
	mkdir -p "$HERALD_NODE_PG_DIR"
	local deb
	for deb in "$tmp"/*.deb; do
		dpkg -x "$deb" "$HERALD_NODE_PG_DIR"
	done
	rm -rf "$tmp"
	NODE_PATH=$(node_pg_path) node -e 'require.resolve("pg")'
}

# HERALD_TS_DIR is where tool_typescript installs TypeScript (npm's
# --prefix); HERALD_TS_VERSION is the version, pinned.
HERALD_TS_DIR=${HERALD_TS_DIR:-/var/cache/herald/typescript}
HERALD_TS_VERSION=5.9.3

# tsc_path is the tsc tool_typescript installs.
tsc_path() {
	echo "$HERALD_TS_DIR/node_modules/typescript/bin/tsc"
}

# TypeScript checks the inbox component's type declarations
# (scripts/component-types.sh). It comes from the npm registry, so it needs
# the network once; afterwards HERALD_TS_DIR holds it. Node.js comes from
# Debian's packages when missing.
tool_typescript() {
	if [ -f "$(tsc_path)" ] && command -v node >/dev/null &&
		[ "$(node "$(tsc_path)" --version 2>/dev/null)" = "Version $HERALD_TS_VERSION" ]; then
		return
	fi
	if ! command -v npm >/dev/null; then
		if can_install; then
			apt_install nodejs npm || return 1
		else
			echo "tools: npm missing (Debian: apt-get install nodejs npm)" >&2
			return 1
		fi
	fi
	echo "tools: installing typescript@$HERALD_TS_VERSION from the npm registry into $HERALD_TS_DIR (log: $HERALD_APT_LOG)" >&2
	mkdir -p "$HERALD_TS_DIR"
	echo "== $(date -u +%FT%TZ) npm install typescript@$HERALD_TS_VERSION" >>"$HERALD_APT_LOG"
	if ! npm install --prefix "$HERALD_TS_DIR" --no-audit --no-fund --no-save --fetch-timeout=60000 --fetch-retries=1 \
		"typescript@$HERALD_TS_VERSION" >>"$HERALD_APT_LOG" 2>&1; then
		tail -5 "$HERALD_APT_LOG" >&2
		return 1
	fi
	[ -f "$(tsc_path)" ]
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	case "${1:-}" in
	protoc) tool_protoc ;;
	chromium) tool_chromium ;;
	python-grpc) tool_python_grpc ;;
	producer-langs) tool_producer_langs ;;
	typescript) tool_typescript ;;
	podman) tool_podman ;;
	*)
		echo "usage: $0 protoc|chromium|python-grpc|producer-langs|typescript|podman" >&2
		exit 2
		;;
	esac
fi
