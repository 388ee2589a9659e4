#!/usr/bin/env bash
# Builds the catalog's real images from Debian's packages (bookworm) for the
# local cluster's real node, into a cache keyed by image and version
# (default ~/.cache/gantry/images/<name>/<tag>/): each a root filesystem
# layer (layer.tar.gz) and what the local registry needs to serve it without
# reading it again (layer.json: its digest, uncompressed digest and size).
# The local signed registry of `gantry dev` and of the tests publishes a
# cached image in place of its catalog entry's stand-in. Needs root and
# debootstrap (Debian: apt-get install debootstrap); prints the cache
# directory. A cold build takes about 2-3 minutes; later calls return at once.
#
#   jupyter:6.4-debian12   Debian's Jupyter Notebook 6.4 and an IPython kernel
set -euo pipefail
cd "$(dirname "$0")"
SUITE=bookworm
MIRROR=${GANTRY_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${GANTRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gantry}/images
mkdir -p "$cache"

# image NAME TAG PACKAGES...: a minbase root filesystem with python3, then
# the packages installed with apt (debootstrap's own resolver cannot pick
# providers of virtual packages), caches and documentation left out.
image() {
  local name=$1 tag=$2 dir="$cache/$1/$2"
  shift 2
  [ -s "$dir/layer.json" ] && return 0
  if [ "$(id -u)" -ne 0 ] || ! command -v debootstrap >/dev/null; then
    echo "images: $name:$tag not built (needs root and debootstrap): the local registry serves its stand-in" >&2
    return 0
  fi
  echo "images: building $name:$tag from Debian's packages (first time: about 2-3 minutes)" >&2
  local start=$SECONDS tmp
  tmp=$(mktemp -d "$cache/.build-$name.XXXXXX")
  trap 'rm -rf "$tmp"' RETURN
  debootstrap --variant=minbase --include=python3 "$SUITE" "$tmp/rootfs" "$MIRROR" > "$tmp/debootstrap.log" 2>&1 ||
    { tail -20 "$tmp/debootstrap.log" >&2; return 1; }
  cp /etc/resolv.conf "$tmp/rootfs/etc/resolv.conf"
  chroot "$tmp/rootfs" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive chroot "$tmp/rootfs" apt-get install -y -qq --no-install-recommends "$@" > "$tmp/apt.log" 2>&1 ||
    { tail -20 "$tmp/apt.log" >&2; return 1; }
  chroot "$tmp/rootfs" apt-get clean
  rm -rf "$tmp/rootfs"/var/lib/apt/lists/* "$tmp/rootfs"/usr/share/doc/* "$tmp/rootfs"/usr/share/man/* \
    "$tmp/rootfs"/usr/share/locale/* "$tmp/rootfs"/var/log/* "$tmp/rootfs"/etc/resolv.conf
  mkdir -p "$tmp/out"
  tar --numeric-owner --sort=name --mtime=@0 -C "$tmp/rootfs" -cf - . | gzip -6 -n > "$tmp/out/layer.tar.gz"
  local digest diffid size
  digest=$(sha256sum < "$tmp/out/layer.tar.gz" | cut -d' ' -f1)
  diffid=$(gzip -dc < "$tmp/out/layer.tar.gz" | sha256sum | cut -d' ' -f1)
  size=$(stat -c %s "$tmp/out/layer.tar.gz")
  printf '{"digest": "sha256:%s", "diffID": "sha256:%s", "size": %s}\n' "$digest" "$diffid" "$size" > "$tmp/out/layer.json"
  rm -rf "$dir"
  mv "$tmp/out" "$dir"
  echo "images: built $name:$tag in $((SECONDS - start))s ($((size / 1048576)) MiB compressed)" >&2
}

image jupyter 6.4-debian12 jupyter-notebook python3-ipykernel
echo "$cache"
