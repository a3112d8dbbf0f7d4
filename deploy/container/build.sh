#!/usr/bin/env bash
# Builds the sluice image without any registry image (docs/deploy.md, "Container image"):
#   1. a Debian 12 root filesystem from Debian's packages (mmdebstrap), imported as
#      localhost/sluice-debian:bookworm (once; BASE_REBUILD=1 makes it again);
#   2. podman build of deploy/container/Containerfile on it: setup.sh and make build in the
#      build stage, the binary and its libraries in the image.
# Needs podman and mmdebstrap (apt-get install podman mmdebstrap runc), network access to the
# Debian mirror, and root (or a rootless podman set up for it).
# Environment: IMAGE (sluice:latest), RUNTIME (podman's OCI runtime; runc when installed),
# MIRROR (http://deb.debian.org/debian).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
IMAGE="${IMAGE:-sluice:latest}"
BASE=localhost/sluice-debian:bookworm
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
# runc where installed: Debian 12's crun refuses hosts whose cgroups are in hybrid mode.
RUNTIME="${RUNTIME:-$(command -v runc >/dev/null && echo runc || true)}"
runtime=()
[[ -n "$RUNTIME" ]] && runtime=(--runtime "$RUNTIME")

if [[ "${BASE_REBUILD:-0}" == 1 ]] || ! podman image exists "$BASE"; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  echo "build.sh: making the Debian 12 root filesystem (mmdebstrap, $MIRROR)" >&2
  mmdebstrap --variant=minbase --include=ca-certificates bookworm "$tmp/rootfs.tar" "$MIRROR"
  podman import "$tmp/rootfs.tar" "$BASE" >/dev/null
fi

# The host's compiler cache, when there is one, speeds the build stage up (the sources'
# paths do not enter the cache keys: docs/building.md).
volumes=()
cache="${CCACHE_DIR:-$HOME/.cache/ccache}"
[[ -d "$cache" ]] && volumes=(--volume "$cache:/root/.cache/ccache")
# Limits within the host's own: podman's defaults are above them on some hosts, and a
# container may not raise its limits.
limits=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit nproc=4096:4096)

podman "${runtime[@]}" build --network=host "${limits[@]}" "${volumes[@]}" --build-arg "BASE=$BASE" \
  -f "$here/Containerfile" -t "$IMAGE" "$repo"
echo "build.sh: built $IMAGE" >&2
