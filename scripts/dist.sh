#!/usr/bin/env bash
# dist.sh builds Herald's release artifacts (make dist):
#
#   $DIST_DIR/herald_<version>_linux_amd64.tar.gz
#   $DIST_DIR/herald_<version>_amd64.deb
#
# Both hold herald, the five bundled plugins, the packaged config
# (packaging/herald.hcl, the example rules), the systemd unit
# (packaging/herald.service) and the examples, in the layout docs/deploy.md
# "Packages" describes. The .deb is assembled in a staging
# tree and built with Debian's own dpkg-deb --build. (goreleaser's nfpm as
# a Go library was weighed and left out: its deb packager alone brings some
# forty modules into the root module, go-git and OpenPGP among them, and
# go mod tidy could not complete with it, one of its test dependencies not
# being on the module proxy; docs/deploy.md "Packages".)
#
# Environment:
#   VERSION      the version to stamp (default: git describe --tags --match 'v[0-9]*' --always
#                --dirty, or 0.0.0-dev outside git)
#   DIST_DIR     where the artifacts go (default: dist)
#   DIST_DEV=1   build as the tests do (cgo as go env says, no -trimpath) so
#                that the build cache of a test run is reused; the release
#                build is static (CGO_ENABLED=0) and -trimpath
#   GO           the go command (default: go)
#   DIST_STAGE=DIR  neither tarball nor .deb: the staged tree (the
#                tarball's contents, without postinst) is moved to DIR, which
#                must not exist; scripts/image.sh builds the image from it
#
# It prints the paths of the two artifacts, one a line, last.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
DIST_DIR=${DIST_DIR:-dist}
PLUGINS="email push sms slack websocket"

VERSION=${VERSION:-$(git describe --tags --match 'v[0-9]*' --always --dirty 2>/dev/null || true)}
VERSION=${VERSION:-0.0.0-dev}
COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$COMMIT" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
	COMMIT="$COMMIT-dirty"
fi
# Build date and file times: SOURCE_DATE_EPOCH when set (reproducible
# builds), else the commit's time, else now.
EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
BUILD_DATE=$(date -u -d "@$EPOCH" +%Y-%m-%dT%H:%M:%SZ)

# The package version: VERSION without a leading v. Debian's versions must
# start with a digit and hold only [A-Za-z0-9.+~-]; a bare commit hash that
# starts with a letter becomes 0.0.0+git.HASH.
PKG_VERSION=${VERSION#v}
case "$PKG_VERSION" in
[0-9]*) ;;
*) PKG_VERSION="0.0.0+git.$PKG_VERSION" ;;
esac
if ! [[ "$PKG_VERSION" =~ ^[0-9][A-Za-z0-9.+~-]*$ ]]; then
	echo "dist: version $VERSION cannot be a Debian package version (want [0-9][A-Za-z0-9.+~-]*)" >&2
	exit 1
fi
# A hyphen splits upstream version and Debian revision, and the revision
# may not be empty.
case "$PKG_VERSION" in
*-) echo "dist: version $VERSION ends in a hyphen" >&2; exit 1 ;;
esac

export GOOS=linux GOARCH=amd64
# No VCS stamp of go build's own (the commit and its time come in LDFLAGS),
# as make build: with -trimpath, two builds of one commit are the same bytes.
buildflags=(-buildvcs=false)
if [ "${DIST_DEV:-0}" != 1 ]; then
	export CGO_ENABLED=0
	buildflags+=(-trimpath)
fi
LDFLAGS="-s -w -X main.Version=$VERSION -X main.Commit=$COMMIT -X main.BuildDate=$BUILD_DATE"

name="herald_${PKG_VERSION}_linux_amd64"
mkdir -p "$DIST_DIR"
work=$(mktemp -d "${TMPDIR:-/tmp}/herald-dist.XXXXXX")
trap 'rm -rf "$work"' EXIT
root="$work/$name"
umask 022

echo "dist: herald $VERSION (package $PKG_VERSION, commit $COMMIT, built $BUILD_DATE)" >&2
install -d "$root/usr/bin" "$root/usr/lib/herald/plugins" "$root/etc/herald/rules" \
	"$root/lib/systemd/system" "$root/usr/share/doc/herald/examples"
# One go build for the six binaries: the package graph is loaded once and
# the links run in parallel. Each plugin's main.Version is its
# PluginVersion (Describe, herald plugins ls); the plugins have no Commit
# or BuildDate, which the linker then ignores.
echo "dist: build herald and herald-plugin-{${PLUGINS// /,}} (a first build compiles every dependency: minutes on two cores)" >&2
pkgs=(./core/cmd/herald)
for p in $PLUGINS; do
	pkgs+=("./plugins/$p")
done
"$GO" build "${buildflags[@]}" -ldflags "$LDFLAGS" -o "$work/bin/" "${pkgs[@]}"
mv "$work/bin/herald" "$root/usr/bin/herald"
for p in $PLUGINS; do
	mv "$work/bin/$p" "$root/usr/lib/herald/plugins/herald-plugin-$p"
done
chmod 0755 "$root/usr/bin/herald" "$root"/usr/lib/herald/plugins/herald-plugin-*

install -m 0644 packaging/herald.hcl "$root/etc/herald/herald.hcl"
install -m 0640 packaging/herald.env "$root/etc/herald/herald.env"
# The example rules, without private keys: the package installs none (the
# example's demo VAPID pair and APNs .p8 are public, in the repository). The
# PUSH channel keeps FCM only, until the operator gives their own VAPID pair
# and .p8 as "file:..." references (the examples under /usr/share/doc keep
# the whole channel). Rules and keys are not world-readable: the files
# 0640, their directories 0750, group herald set by postinst.
sed -e '/^channel "PUSH" {/,/^}/{s/providers  = \["fcm", "webpush", "apns"\]/providers  = ["fcm"] # webpush, apns: give your own VAPID pair and .p8 (see the example rules)/;/^      \(vapid_\|webpush_ttl\|apns_\)/d}' \
	examples/rules/herald.hcl >"$work/rules.hcl"
if grep -qi 'private\|apns_key\|BEGIN' "$work/rules.hcl"; then
	echo "dist: the packaged rules still hold a key; update the sed above to the example rules" >&2
	exit 1
fi
install -m 0640 "$work/rules.hcl" "$root/etc/herald/rules/herald.hcl"
rm "$work/rules.hcl"
chmod 0750 "$root/etc/herald/rules"
install -d -m 0750 "$root/etc/herald/keys"
install -m 0644 packaging/herald.service "$root/lib/systemd/system/herald.service"
install -m 0644 README.md "$root/usr/share/doc/herald/README.md"
# The pages the README links to, under the same relative paths.
(find docs -type f -print) | while read -r f; do
	install -D -m 0644 "$f" "$root/usr/share/doc/herald/$f"
done
# The examples as the repository has them (the quick start's config, both
# rules syntaxes, directory files to import, events to emit, the Grafana
# dashboard); the Go and Python plugin sources stay in the repository, and
# so do the throw-away keys `make run` has herald devpeers write into
# examples/quickstart/.devpeers.
(cd examples && find herald.hcl rules directory events quickstart grafana -path quickstart/.devpeers -prune -o -type f -print) | while read -r f; do
	install -D -m 0644 "examples/$f" "$root/usr/share/doc/herald/examples/$f"
done

if [ -n "${DIST_STAGE:-}" ]; then
	mv "$root" "$DIST_STAGE"
	echo "$DIST_STAGE"
	exit 0
fi

# The tarball: the same tree under one directory, with the postinst to run
# after copying it into place (docs/deploy.md "Packages").
install -m 0755 packaging/debian/postinst "$root/postinst"
tar --create --gzip --file "$DIST_DIR/$name.tar.gz" --directory "$work" \
	--sort=name --owner=0 --group=0 --numeric-owner --mtime="@$EPOCH" "$name"
rm "$root/postinst"

# The Debian package.
install -d "$root/DEBIAN"
for s in postinst prerm postrm; do
	install -m 0755 "packaging/debian/$s" "$root/DEBIAN/$s"
done
# Every file under /etc is a conffile: an upgrade keeps the operator's edits.
(cd "$root" && find etc -type f | sort | sed 's|^|/|') >"$root/DEBIAN/conffiles"
(cd "$root" && find usr lib etc -type f | sort | xargs md5sum) >"$root/DEBIAN/md5sums"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<CONTROL
Package: herald
Version: $PKG_VERSION
Architecture: amd64
Maintainer: Herald maintainers <herald@localhost>
Installed-Size: $size
Depends: adduser | passwd
Recommends: postgresql-client
Suggests: postgresql, rabbitmq-server
Section: net
Priority: optional
Description: self-hosted notification gateway
 Herald reads events from a PostgreSQL outbox, decides who must hear about
 them and on which channels, moves every delivery through RabbitMQ and hands
 it to a channel plugin (email, push, SMS, Slack, WebSocket).
 .
 This package holds herald, the five bundled plugins, a configuration in
 /etc/herald and the herald.service systemd unit (not enabled on install).
CONTROL
find "$root" -exec touch -h -d "@$EPOCH" {} +
deb="$DIST_DIR/herald_${PKG_VERSION}_amd64.deb"
# dpkg-deb stamps the archive's members with SOURCE_DATE_EPOCH when set,
# else with the clock: the commit's time keeps the .deb reproducible.
SOURCE_DATE_EPOCH=$EPOCH dpkg-deb --root-owner-group -Zgzip -z6 --build "$root" "$deb" >&2
echo "$DIST_DIR/$name.tar.gz"
echo "$deb"
