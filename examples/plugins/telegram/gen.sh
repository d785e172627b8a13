#!/usr/bin/env bash
# gen.sh builds the Telegram channel plugin, a Herald plugin written in
# Python, into one executable file (a Python zip application, so the host
# may copy it anywhere and run it):
#
#   examples/plugins/telegram/gen.sh OUT          build OUT (e.g. bin/plugins/herald-plugin-telegram)
#   examples/plugins/telegram/gen.sh --stubs      regenerate plugin/herald_channel_v2_pb2.py
#   examples/plugins/telegram/gen.sh --check      fail if the committed stubs are out of date
#
# The message classes are generated from sdk/proto/herald/channel/v2 by
# Debian's protoc (protobuf-compiler) and committed; the service itself is
# registered with grpcio's generic handlers, so no gRPC code generator is
# needed. It runs on Debian's /usr/bin/python3 with python3-grpcio,
# python3-protobuf and the openssl command (scripts/tools.sh python-grpc
# installs them).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
stub=$here/plugin/herald_channel_v2_pb2.py

gen_stub() { # gen_stub DIR: writes DIR/herald_channel_v2_pb2.py
	local tmp
	tmp=$(mktemp -d)
	mkdir -p "$tmp/src"
	# A flat copy so the generated module is importable as herald_channel_v2_pb2.
	cp "$root/sdk/proto/herald/channel/v2/channel.proto" "$tmp/src/herald_channel_v2.proto"
	(cd "$tmp/src" && protoc -I . -I /usr/include --python_out="$tmp" herald_channel_v2.proto)
	cp "$tmp/herald_channel_v2_pb2.py" "$1/herald_channel_v2_pb2.py"
	rm -rf "$tmp"
}

case "${1:-}" in
--stubs)
	gen_stub "$here/plugin"
	echo "gen.sh: wrote $stub"
	;;
--check)
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	gen_stub "$tmp"
	if ! cmp -s "$tmp/herald_channel_v2_pb2.py" "$stub"; then
		echo "gen.sh: $stub is out of date; run examples/plugins/telegram/gen.sh --stubs and commit it" >&2
		exit 1
	fi
	echo "gen.sh: Python stubs in sync"
	;;
"" | -*)
	echo "usage: gen.sh OUT | --stubs | --check" >&2
	exit 2
	;;
*)
	out=$1
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	cp "$here/plugin/__main__.py" "$here/plugin/herald_channel_v2_pb2.py" "$tmp/"
	mkdir -p "$(dirname "$out")"
	/usr/bin/python3 -m zipapp "$tmp" -p /usr/bin/python3 -o "$out.tmp"
	chmod 0755 "$out.tmp"
	mv "$out.tmp" "$out"
	;;
esac
