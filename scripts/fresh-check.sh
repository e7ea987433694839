#!/usr/bin/env bash
# Runs one of the README's two commands the way a new user would: on a fresh,
# minimal Debian 12 root where nothing was installed by hand.
#
#   scripts/fresh-check.sh run  [MODEL.gguf] [infer run flags]   # ./scripts/run.sh ...
#   scripts/fresh-check.sh test                                  # ./scripts/test.sh --all
#
# It builds the root with Debian's mmdebstrap (installed on the host when
# missing), copies the working tree (tracked and untracked files that git does
# not ignore) to /src/main and ../shared to /src/shared, mounts /proc, /sys, a
# /dev of its own and the host's /dev/pts, and runs the command there as root
# through chroot. The CUDA toolkit
# that the development machines keep at /usr/local/cuda (not a Debian package)
# is bind-mounted read-only when present, so the CUDA backend is still compiled.
# The root is deleted afterwards (INFER_FRESH_KEEP=1 keeps it and prints where).
#
# Environment: INFER_FRESH_MIRROR (default http://deb.debian.org/debian),
# INFER_FRESH_DIR (where to make the root; default $TMPDIR or /tmp),
# INFER_SHARED_DIR (default ../shared), and INFER_FUZZ_SECONDS is passed on.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
what=${1:-}
case "$what" in
  run|test) shift ;;
  *) echo "usage: $0 run [MODEL.gguf] [infer run flags] | $0 test" >&2; exit 2 ;;
esac
shared=${INFER_SHARED_DIR:-$here/../shared}
mirror=${INFER_FRESH_MIRROR:-http://deb.debian.org/debian}
security=${mirror%/debian}/debian-security

if [ "$(id -u)" != 0 ]; then
  echo "fresh-check: needs root (chroot and mounts)" >&2
  exit 2
fi
if ! command -v mmdebstrap >/dev/null; then
  echo "fresh-check: installing mmdebstrap on the host"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
fi

base=${INFER_FRESH_DIR:-${TMPDIR:-/tmp}}
mkdir -p "$base"
rootfs=$(mktemp -d "$base/infer-fresh.XXXXXX")
mounted=()
cleanup() {
  local rc=$?
  local i
  for ((i=${#mounted[@]}-1; i>=0; i--)); do
    umount "${mounted[$i]}" 2>/dev/null || umount -l "${mounted[$i]}" 2>/dev/null || true
  done
  if [ "${INFER_FRESH_KEEP:-0}" = 1 ]; then
    echo "fresh-check: root kept at $rootfs"
  elif findmnt -rn -o TARGET | grep -q "^$rootfs"; then
    # Never delete through a mount that is still there (it could be /dev).
    echo "fresh-check: $rootfs still has mounts; not deleting it" >&2
  else
    rm -rf "$rootfs"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== fresh-check: building a minimal Debian 12 root in $rootfs"
t0=$(date +%s)
mmdebstrap --quiet --variant=minbase --include=ca-certificates bookworm "$rootfs" \
  "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
  "deb $security bookworm-security main"
echo "   root ready in $(( $(date +%s) - t0 )) s"

# The working tree as a fresh clone would have it (no build folders).
mkdir -p "$rootfs/src/main" "$rootfs/src/shared"
(cd "$here" && git ls-files -z --cached --others --exclude-standard |
  xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
  tar --null -T - -cf -) | tar -xf - -C "$rootfs/src/main"
if [ -d "$shared" ]; then
  cp -a "$shared/." "$rootfs/src/shared/"
  chmod -R a-w "$rootfs/src/shared"   # CI gets shared/ without write bits
else
  echo "fresh-check: no shared folder at $shared; tests that need it will skip" >&2
  rmdir "$rootfs/src/shared"
fi

bind() {  # bind SRC DST [ro]
  mkdir -p "$2"
  mount --bind "$1" "$2"
  mounted+=("$2")
  if [ "${3:-}" = ro ]; then mount -o remount,bind,ro "$2"; fi
}
mount -t proc proc "$rootfs/proc"; mounted+=("$rootfs/proc")
mount -t sysfs sysfs "$rootfs/sys"; mounted+=("$rootfs/sys")
# /dev of its own (a tmpfs with the nodes a build and its tests use), not the
# host's /dev bound in: whatever happens to the root (a stray rm -rf through
# a mount that outlived a killed run) cannot reach the host's device nodes.
mount -t tmpfs -o mode=755 tmpfs "$rootfs/dev"; mounted+=("$rootfs/dev")
for n in "null 1 3" "zero 1 5" "full 1 7" "random 1 8" "urandom 1 9" "tty 5 0" "ptmx 5 2"; do
  read -r node major minor <<<"$n"
  mknod -m 666 "$rootfs/dev/$node" c "$major" "$minor"
done
ln -s /proc/self/fd "$rootfs/dev/fd"
ln -s /proc/self/fd/0 "$rootfs/dev/stdin"
ln -s /proc/self/fd/1 "$rootfs/dev/stdout"
ln -s /proc/self/fd/2 "$rootfs/dev/stderr"
bind /dev/pts "$rootfs/dev/pts"
mkdir -p "$rootfs/dev/shm"
mount -t tmpfs -o mode=1777 tmpfs "$rootfs/dev/shm"; mounted+=("$rootfs/dev/shm")
if [ -d /usr/local/cuda ]; then
  bind "$(readlink -f /usr/local/cuda)" "$rootfs/usr/local/cuda" ro
fi
cp -L /etc/resolv.conf "$rootfs/etc/resolv.conf" 2>/dev/null || true
# The network's own trust anchors: where this machine reaches the internet
# through a proxy with its own certificate authority (installed, as Debian
# expects local CAs, under /usr/local/share/ca-certificates), the fresh root
# trusts it too, as a new machine on this network would. Without it npm cannot
# reach its registry and the OpenAI client test reports itself skipped.
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
  mkdir -p "$rootfs/usr/local/share/ca-certificates"
  if ! { cp -L /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/" &&
         chroot "$rootfs" update-ca-certificates >/dev/null 2>&1; }; then
    echo "fresh-check: the local CA certificates could not be added (npm may not reach its registry)"
  fi
fi

if [ "$what" = run ]; then
  cmd=(./scripts/run.sh "$@")
else
  cmd=(./scripts/test.sh --all)
fi
echo "== fresh-check: running ${cmd[*]} in the fresh root"
env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  LANG=C.UTF-8 TERM="${TERM:-dumb}" CI="${CI:-}" INFER_FRESH_ROOT=1 \
  ${NODE_EXTRA_CA_CERTS:+NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt} \
  ${INFER_FUZZ_SECONDS:+INFER_FUZZ_SECONDS=$INFER_FUZZ_SECONDS} \
  chroot "$rootfs" /bin/bash -c 'cd /src/main && exec "$@"' bash "${cmd[@]}"
echo "== fresh-check: ${cmd[*]} passed on a fresh Debian 12 root ($(( $(date +%s) - t0 )) s in all)"
