#!/usr/bin/env bash
# image.sh builds Herald's container image (make image) as an OCI archive
# that `podman load -i` and `docker load -i` read:
#
#   $DIST_DIR/herald_<version>_linux_amd64.oci.tar
#
# No base image and no container runtime: scripts/dist.sh builds the static
# binaries and the packaged tree, this script stages it as the image's root
# (herald, the five bundled plugins, /etc/herald with the container config
# of packaging/container/herald.hcl and the packaged rules, the docs and
# examples, /etc/passwd with the herald user, the CA bundle) and
# core/internal/tools/ociimage writes the archive. Every timestamp is the
# commit's, so one commit built twice gives the same archive and the same
# image digest (docs/deploy.md "Containers").
#
# Environment:
#   VERSION, DIST_DIR, GO       as scripts/dist.sh
#   IMAGE_NAME       the image's name (default localhost/herald); its tag is the version
#   IMAGE_SOURCE     the source label (default https://github.com/heraldhq/herald)
#   IMAGE_CA_BUNDLE  the CA certificates the plugins verify providers with
#                    (default /etc/ssl/certs/ca-certificates.crt, Debian's
#                    ca-certificates; the image's digest depends on it)
#
# It prints the archive's path, the image digest and the image id, one a
# line, last.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
DIST_DIR=${DIST_DIR:-dist}
IMAGE_NAME=${IMAGE_NAME:-localhost/herald}
IMAGE_SOURCE=${IMAGE_SOURCE:-https://github.com/heraldhq/herald}
IMAGE_CA_BUNDLE=${IMAGE_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
# The image's user: herald, uid and gid 65532 (no name on the host needs
# to match; Kubernetes' runAsUser and the chart use the number).
HERALD_UID=65532

work=$(mktemp -d "${TMPDIR:-/tmp}/herald-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
umask 022

# The static binaries and the packaged tree, as the tarball has them.
root="$work/root"
DIST_DEV=0 DIST_STAGE="$root" DIST_DIR="$work/dist" scripts/dist.sh >/dev/null
# Not for a container: the systemd unit and its environment file (secrets
# come from the container's environment).
rm -rf "$root/lib" "$root/etc/herald/herald.env"
install -m 0644 packaging/container/herald.hcl "$root/etc/herald/herald.hcl"

# What herald version says of itself is what the labels say.
eval "$("$root/usr/bin/herald" version --json | "$GO" run ./core/internal/tools/ociimage/cmd/ociimage --version-env)"
# The archive's name as the packages': the version without a leading v.
pkg=$(printf '%s' "${HERALD_VERSION#v}" | tr -c 'A-Za-z0-9_.+~-' '-')
tag=$(printf '%s' "$HERALD_VERSION" | tr -c 'A-Za-z0-9_.-' '-')

# The herald user and group, and root for tools that look it up.
cat >"$root/etc/passwd" <<PASSWD
root:x:0:0:root:/root:/sbin/nologin
herald:x:$HERALD_UID:$HERALD_UID:herald:/var/lib/herald:/sbin/nologin
PASSWD
cat >"$root/etc/group" <<GROUP
root:x:0:
herald:x:$HERALD_UID:
GROUP
if [ -f "$IMAGE_CA_BUNDLE" ]; then
	install -D -m 0644 "$IMAGE_CA_BUNDLE" "$root/etc/ssl/certs/ca-certificates.crt"
else
	echo "image: no CA bundle at $IMAGE_CA_BUNDLE (Debian: apt-get install ca-certificates): plugins will not verify providers' TLS" >&2
fi
# /tmp: where the plugin host keeps the plugins' private copies and each
# plugin its TMPDIR (a tmpfs or emptyDir over it when the root is
# read-only); /var/lib/herald: herald's home and working directory
# (`herald db roles` writes its passfile there).
install -d -m 1777 "$root/tmp"
install -d -m 0750 "$root/var/lib/herald"

out="$DIST_DIR/herald_${pkg}_linux_amd64.oci.tar"
mkdir -p "$DIST_DIR"
echo "image: $IMAGE_NAME:$tag (herald $HERALD_VERSION, commit $HERALD_COMMIT, built $HERALD_BUILD_DATE)" >&2
mapfile -t ids < <("$GO" run ./core/internal/tools/ociimage/cmd/ociimage \
	--root "$root" --out "$out" --name "$IMAGE_NAME:$tag" --created "$HERALD_BUILD_DATE" \
	--user "$HERALD_UID:$HERALD_UID" --workdir /var/lib/herald \
	--entrypoint /usr/bin/herald --cmd serve \
	--env PATH=/usr/bin --env HOME=/var/lib/herald --env TMPDIR=/tmp \
	--env HERALD_CONFIG=/etc/herald/herald.hcl \
	--volume /tmp --volume /var/lib/herald --port 8080/tcp --port 8081/tcp \
	--owner "var/lib/herald=$HERALD_UID:$HERALD_UID" \
	--owner "etc/herald/rules=0:$HERALD_UID" --owner "etc/herald/rules/herald.hcl=0:$HERALD_UID" \
	--owner "etc/herald/keys=0:$HERALD_UID" \
	--label "org.opencontainers.image.title=herald" \
	--label "org.opencontainers.image.description=Herald, a self-hosted notification gateway" \
	--label "org.opencontainers.image.version=$HERALD_VERSION" \
	--label "org.opencontainers.image.revision=$HERALD_COMMIT" \
	--label "org.opencontainers.image.created=$HERALD_BUILD_DATE" \
	--label "org.opencontainers.image.source=$IMAGE_SOURCE" \
	--label "org.opencontainers.image.documentation=$IMAGE_SOURCE/blob/$HERALD_COMMIT/docs/deploy.md")
echo "$out"
printf '%s\n' "${ids[@]}"
