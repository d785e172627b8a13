#!/usr/bin/env bash
# Regenerates the Go code for the plugin protocol with the generators pinned
# as `tool` directives in go.mod. The .proto files live in sdk/proto (the
# contract, readable by plugins in any language); the Go packages generated
# from them go where their go_package option says, under sdk/internal/proto,
# so that nothing outside the sdk module imports them.
#
#   scripts/gen-proto.sh          regenerate in place (make proto)
#   scripts/gen-proto.sh check    fail if the committed code is out of date (make check)
#
# It also regenerates (checks) the Python message classes of the Python
# plugin example (examples/plugins/telegram/gen.sh --stubs / --check).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
mode=${1:-generate}

if ! command -v protoc >/dev/null; then
	echo "gen-proto: protoc not found (Debian: apt-get install protobuf-compiler)" >&2
	exit 1
fi
wkt=/usr/include/google/protobuf/duration.proto
if [ ! -f "$wkt" ]; then
	echo "gen-proto: $wkt not found (Debian: apt-get install libprotobuf-dev)" >&2
	exit 1
fi

# Wrap the pinned generators so protoc finds them on PATH.
bindir=$(mktemp -d)
trap 'rm -rf "$bindir" "${outdir:-}"' EXIT
for gen in protoc-gen-go protoc-gen-go-grpc; do
	printf '#!/bin/sh\nexec go -C %q tool %s "$@"\n' "$root" "$gen" >"$bindir/$gen"
	chmod +x "$bindir/$gen"
done
export PATH="$bindir:$PATH"

protos=$(cd sdk/proto && find . -name '*.proto' | sed 's|^\./||' | sort)
outdir=$(mktemp -d)
# shellcheck disable=SC2086
# module= strips the sdk module's path from go_package: the files land in
# $outdir/internal/proto/..., the path under sdk/ they are committed at.
(cd sdk/proto && protoc -I . -I /usr/include \
	--go_out="$outdir" --go_opt=module=github.com/heraldhq/herald/sdk \
	--go-grpc_out="$outdir" --go-grpc_opt=module=github.com/heraldhq/herald/sdk \
	$protos)

status=0
while IFS= read -r gen; do
	rel=${gen#"$outdir"/}
	dst=sdk/$rel
	if [ "$mode" = check ]; then
		if ! cmp -s "$gen" "$dst"; then
			echo "gen-proto: $dst is out of date; run make proto and commit the result" >&2
			diff -u "$dst" "$gen" | head -40 >&2 || true
			status=1
		fi
	else
		mkdir -p "$(dirname "$dst")"
		cp "$gen" "$dst"
		echo "gen-proto: wrote $dst"
	fi
done < <(find "$outdir" -name '*.go' | sort)

if [ "$mode" = check ]; then
	# Generated files with no .proto behind them are stale too.
	while IFS= read -r dst; do
		rel=${dst#sdk/}
		[ -f "$outdir/$rel" ] || { echo "gen-proto: $dst has no .proto source" >&2; status=1; }
	done < <(find sdk/proto sdk/internal/proto -name '*.pb.go' 2>/dev/null | sort)
	[ $status -eq 0 ] && echo "gen-proto: generated code is in sync"
fi
if [ "$mode" = check ]; then
	examples/plugins/telegram/gen.sh --check || status=1
else
	examples/plugins/telegram/gen.sh --stubs
fi
exit $status
