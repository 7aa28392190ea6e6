#!/usr/bin/env bash
# Build the container image from the Dockerfile with buildah: no daemon (--isolation chroot, the
# vfs storage driver), as root.
#
#   scripts/build-image.sh --tag NAME [--base IMAGE | --stand-in] [--fresh-base]
#
# The base is the Dockerfile's ARG BASE (the pinned python:*-slim-<release> image), pulled when a
# registry answers. Where none does, a stand-in is made from Debian's own packages (debootstrap
# --variant=minbase of the same release, with its python3 and pip) and both stages use it; the
# script says so. --stand-in skips the pull; --base uses the given image. The stand-in is kept in
# the image store as localhost/hetero-exporter-stand-in:<release> and reused; --fresh-base makes
# it anew.
#
# This machine's pip settings (index, extra indexes, find-links, trusted hosts, CA bundle,
# constraints: what `pip config list` and PIP_* say here) reach the build's pip, with the local
# paths they name mounted read-only (scripts/pip_forward.py); none of it stays in the image.
#
# Environment: HETERO_IMAGE_STORE=DIR keeps the image store there instead of buildah's default
# (CI: a fresh one per run); DEBIAN_MIRROR overrides the mirror debootstrap uses.
set -euo pipefail
cd "$(dirname "$0")/.."
trap 'echo "build-image.sh: line $LINENO: a command exited $?" >&2' ERR

usage() {
  echo "usage: scripts/build-image.sh --tag NAME [--base IMAGE | --stand-in] [--fresh-base]" >&2
  exit 2
}

tag="" base="" stand_in=0 fresh_base=0
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) [ $# -ge 2 ] && [ -n "$2" ] || usage; tag=$2; shift 2 ;;
    --base) [ $# -ge 2 ] && [ -n "$2" ] || usage; base=$2; shift 2 ;;
    --stand-in) stand_in=1; shift ;;
    --fresh-base) fresh_base=1; shift ;;
    -h|--help) usage ;;
    *) echo "build-image.sh: unknown argument: $1" >&2; usage ;;
  esac
done
[ -n "$tag" ] || { echo "build-image.sh: --tag NAME is required" >&2; usage; }
[ -z "$base" ] || [ "$stand_in" -eq 0 ] || { echo "build-image.sh: --base and --stand-in exclude each other" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "build-image.sh: run as root (buildah's chroot isolation, debootstrap)" >&2; exit 2; }
for tool in buildah python3; do
  command -v "$tool" >/dev/null || { echo "build-image.sh: $tool not found (apt-get install buildah)" >&2; exit 2; }
done

store=(--storage-driver vfs)
if [ -n "${HETERO_IMAGE_STORE:-}" ]; then
  store+=(--root "$HETERO_IMAGE_STORE/root" --runroot "$HETERO_IMAGE_STORE/run")
fi
bah() { buildah "${store[@]}" "$@"; }
have_image() { bah inspect --type image "$1" >/dev/null 2>&1; }
step() { printf '[build-image %4ss] %s\n' "$SECONDS" "$*"; }

work=$(mktemp -d "${TMPDIR:-/tmp}/hetero-build-image.XXXXXX")
cleanup() {
  # a debootstrap cut short leaves /proc and /sys mounted in its tree: unmount before removing
  if [ -d "$work/rootfs" ]; then
    { findmnt -rn -o TARGET | grep -F "$work/rootfs/" || true; } | sort -r | while read -r m; do umount -l "$m" || true; done
  fi
  rm -rf --one-file-system "$work" || true
}
trap cleanup EXIT

# The default base and its Debian release come from the Dockerfile, the one place they are named.
default_base=$(sed -n 's/^ARG BASE=\(.*\)$/\1/p' Dockerfile)
release=${default_base##*-}
[ -n "$default_base" ] && [ "$release" != "$default_base" ] || {
  echo "build-image.sh: Dockerfile has no ARG BASE=...-slim-<release>" >&2; exit 1; }

make_stand_in() {
  local name=$1 mirror ctr mnt
  mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
  command -v debootstrap >/dev/null || { echo "build-image.sh: debootstrap not found (apt-get install debootstrap)" >&2; exit 1; }
  step "debootstrap --variant=minbase $release from $mirror (python3, python3-pip, ca-certificates)"
  if ! debootstrap --variant=minbase --include=python3,python3-pip,ca-certificates \
      "$release" "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1; then
    tail -n 20 "$work/debootstrap.log" >&2
    echo "build-image.sh: debootstrap of $release failed" >&2
    exit 1
  fi
  # As Debian's -slim images: no package lists, downloaded .debs, manuals or translations (the
  # copyright files stay); /dev, /proc, /sys are the runtime's, empty in the image.
  (cd "$work/rootfs" && rm -rf var/lib/apt/lists/* var/cache/apt/* var/cache/debconf/*-old \
      usr/share/man/* usr/share/info/* usr/share/locale/* var/log/* dev/* proc/* sys/* \
    && find usr/share/doc -mindepth 1 ! -type d ! -name copyright -delete)
  ctr=$(bah from scratch)
  mnt=$(bah mount "$ctr")
  cp -a "$work/rootfs/." "$mnt/"
  bah umount "$ctr" >/dev/null
  bah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
    --cmd python3 --label "org.opencontainers.image.description=stand-in for $default_base: Debian $release's python3 (debootstrap)" "$ctr"
  bah commit --rm --quiet "$ctr" "$name" >/dev/null
  step "stand-in base committed as $name"
}

if [ -n "$base" ]; then
  have_image "$base" || timeout 120 buildah "${store[@]}" pull --quiet "$base" >/dev/null || { echo "build-image.sh: base $base: not in the store and not pullable" >&2; exit 1; }
  step "base: $base"
else
  base=$default_base
  if [ "$stand_in" -eq 0 ] && { have_image "$base" || timeout 120 buildah "${store[@]}" pull --quiet "$base" >"$work/pull.log" 2>&1; }; then
    step "base: $base"
  else
    [ "$stand_in" -eq 1 ] || step "cannot pull $base ($(tail -n 1 "$work/pull.log" | cut -c1-160))"
    standin_name="localhost/hetero-exporter-stand-in:$release"
    if [ "$fresh_base" -eq 0 ] && have_image "$standin_name"; then
      step "reusing the stand-in base $standin_name made earlier (--fresh-base makes it anew)"
    else
      make_stand_in "$standin_name"
    fi
    base=$standin_name
    step "STAND-IN BASE: both stages build FROM $base (Debian $release's python3), not $default_base"
  fi
fi

# pip settings of this machine, and the local paths they name, into the build: a home folder for
# root mounted at /root with .config/pip/pip.conf, the paths mounted below it (pip_forward.py).
python3 scripts/pip_forward.py "$work/home" >"$work/mounts"
volumes=()
while IFS=$'\t' read -r host inside; do
  [ -n "$host" ] && volumes+=(--volume "$host:$inside:ro")
done <"$work/mounts"
step "pip settings forwarded: $(grep -c '=' "$work/home/.config/pip/pip.conf" || true) keys, $(( ${#volumes[@]} / 2 - 1 )) local paths"

revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
step "buildah bud --tag $tag"
bah bud --isolation chroot --pull=false --tag "$tag" \
  --build-arg BASE="$base" --build-arg REVISION="$revision" \
  --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  "${volumes[@]}" -f Dockerfile .
step "built $tag: $(bah images --format '{{.Size}}' "$tag" | sed -n 1p)"
