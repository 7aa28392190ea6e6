#!/usr/bin/env bash
# Run the agent inside a built image, without a daemon (buildah run, chroot isolation), as root:
#
#   scripts/check-image.sh IMAGE
#
# 1. `hetero-exporter version`;
# 2. `inspect --simulate` lists the simulated node and its devices;
# 3. `run --simulate` on a loopback port (chroot isolation shares this machine's network) answers
#    /readyz with 200 and /metrics with the simulated devices, scraped from outside the image;
# then prints the image's size and the largest packages of its virtualenv. Exits non-zero on the
# first check that fails. HETERO_IMAGE_STORE=DIR: the image store scripts/build-image.sh used.
set -euo pipefail
cd "$(dirname "$0")/.."
trap 'echo "check-image.sh: line $LINENO: a command exited $?" >&2' ERR

[ $# -eq 1 ] && [ -n "$1" ] || { echo "usage: scripts/check-image.sh IMAGE" >&2; exit 2; }
image=$1
command -v buildah >/dev/null || { echo "check-image.sh: buildah not found (apt-get install buildah)" >&2; exit 2; }

store=(--storage-driver vfs)
if [ -n "${HETERO_IMAGE_STORE:-}" ]; then
  store+=(--root "$HETERO_IMAGE_STORE/root" --runroot "$HETERO_IMAGE_STORE/run")
fi
bah() { buildah "${store[@]}" "$@"; }
step() { printf '[check-image %4ss] %s\n' "$SECONDS" "$*"; }
fail() { echo "check-image.sh: FAILED: $*" >&2; exit 1; }

bah inspect --type image "$image" >/dev/null 2>&1 || { echo "check-image.sh: no image $image in the store" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/hetero-check-image.XXXXXX")
ctr="" agent=""
# The processes below a pid, the pid itself last (children first). buildah run neither forwards a
# signal to what runs inside nor takes it down when killed: the `timeout` it runs is signalled,
# which hands SIGTERM to the agent (as the kubelet would) and exits with the agent's status.
tree() {
  local child
  for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do tree "$child"; done
  echo "$1"
}
stop_agent() {
  local pid
  for pid in $(tree "$agent"); do
    [ "$(ps -o comm= -p "$pid" 2>/dev/null)" != timeout ] || kill -TERM "$pid" 2>/dev/null || true
  done
  for _ in $(seq 1 60); do kill -0 "$agent" 2>/dev/null || return 0; sleep 0.5; done
  return 1
}
cleanup() {
  if [ -n "$agent" ] && kill -0 "$agent" 2>/dev/null; then
    stop_agent || for pid in $(tree "$agent"); do kill -KILL "$pid" 2>/dev/null || true; done
  fi
  [ -z "$ctr" ] || bah rm "$ctr" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

ctr=$(bah from --pull=false --quiet "$image")
# `timeout` inside bounds every command even if this script is killed before its cleanup. No
# standard input: buildah run copies it in, and one left open (a pipe) can outlive the command.
inimage() { bah run --isolation chroot "$ctr" -- timeout "$@" </dev/null; }

step "hetero-exporter version"
inimage 60 hetero-exporter version | tee "$work/version"
grep -Eq '[0-9]+\.[0-9]+\.[0-9]+' "$work/version" || fail "version printed no version"

step "hetero-exporter inspect --simulate"
inimage 120 hetero-exporter inspect --simulate --kernel-log off >"$work/inspect" 2>"$work/inspect.err" \
  || { cat "$work/inspect.err" >&2; fail "inspect --simulate exited non-zero"; }
head -n 3 "$work/inspect"
grep -Eq '^node sim-node-1: [1-9][0-9]* device' "$work/inspect" || fail "inspect --simulate did not list the simulated node"

step "hetero-exporter run --simulate on 127.0.0.1 (a free port)"
# Made here: the background job opens its redirections after the fork, and the loop below may
# read the log before that (sed: no such file, the check's failure on a loaded machine).
: >"$work/run.out"; : >"$work/run.log"
buildah "${store[@]}" run --isolation chroot "$ctr" -- timeout 300 \
  hetero-exporter run --simulate --kernel-log off --listen 127.0.0.1:0 --log-format json \
  </dev/null >"$work/run.out" 2>"$work/run.log" &
agent=$!  # buildah's own pid: a simple command, not a function's subshell
port=""
for _ in $(seq 1 240); do  # 120 s to the first "serving" line
  port=$(sed -n 's/.*"msg": "serving", "listen": "127\.0\.0\.1:\([0-9]*\)".*/\1/p' "$work/run.log" | sed -n 1p)
  [ -n "$port" ] && break
  kill -0 "$agent" 2>/dev/null || { cat "$work/run.log" >&2; fail "run --simulate exited before serving"; }
  sleep 0.5
done
[ -n "$port" ] || { tail -n 20 "$work/run.log" >&2; fail "run --simulate did not serve within 120 s"; }

fetch() { python3 -c 'import sys, urllib.request
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=10); print(r.status); sys.stdout.write(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code)
except OSError as e:
    print(0, e)' "http://127.0.0.1:$port$1"; }
ready="" metrics=""
for _ in $(seq 1 120); do  # 60 s to ready and a scrape with the simulated devices
  [ -n "$ready" ] || { fetch /readyz >"$work/readyz"; [ "$(head -n 1 "$work/readyz")" = 200 ] && ready=1; }
  fetch /metrics >"$work/metrics"
  if [ -n "$ready" ] && [ "$(head -n 1 "$work/metrics")" = 200 ] && grep -q '^accelerator_device_info{' "$work/metrics"; then
    metrics=1; break
  fi
  sleep 0.5
done
[ -n "$ready" ] || { tail -n 20 "$work/run.log" >&2; fail "/readyz never answered 200 (last: $(head -n 1 "$work/readyz"))"; }
[ -n "$metrics" ] || { tail -n 20 "$work/run.log" >&2; fail "/metrics never showed accelerator_device_info"; }
step "/readyz 200 ($(sed -n 2p "$work/readyz")); /metrics 200: $(grep -c '^accelerator_device_info{' "$work/metrics") devices, $(grep -vc '^#' "$work/metrics") series"

stop_agent || fail "run --simulate did not stop within 30 s of SIGTERM"
rc=0; wait "$agent" || rc=$?
agent=""
grep -q '"msg": "stopping", "signal": "SIGTERM"' "$work/run.log" && [ "$rc" -eq 0 ] \
  || { tail -n 5 "$work/run.log" >&2; fail "run --simulate on SIGTERM: exit $rc, no clean stop"; }
step "SIGTERM: stopped cleanly (exit 0)"

# Sizes: the image (its layers, uncompressed) and what the virtualenv holds, largest first.
mnt=$(bah mount "$ctr")
# Nothing of the build machine in the image: the pip settings and their mounts stayed outside.
for leftover in /root/.pip-forward /root/.config/pip /etc/pip.conf /wheels /src; do
  [ ! -e "$mnt$leftover" ] && [ ! -L "$mnt$leftover" ] || fail "the image carries $leftover"
done
step "image $image: $(bah images --format '{{.Size}}' "$image" | sed -n 1p); rootfs $(du -sh --apparent-size "$mnt" | cut -f1); /opt/venv $(du -sh --apparent-size "$mnt/opt/venv" | cut -f1)"
echo "largest in /opt/venv/lib/python*/site-packages (apparent size):"
du -s --apparent-size -B1 "$mnt"/opt/venv/lib/python3*/site-packages/* | sort -rn | sed -n 1,12p \
  | awk '{ n = split($2, p, "/"); printf "  %7.1f MB  %s\n", $1 / 1e6, p[n] }'
bah umount "$ctr" >/dev/null
step "all checks passed"
