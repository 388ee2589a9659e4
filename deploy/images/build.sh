#!/usr/bin/env bash
# Builds the catalog's real images from Debian's packages (bookworm) for the
# local cluster's real node, into a cache keyed by image and version
# (default ~/.cache/gantry/images/<name>/<tag>/): each a root filesystem
# layer (layer.tar.gz) and what the local registry needs to serve it without
# reading it again (layer.json: its digest, uncompressed digest and size).
# The local signed registry of `gantry dev` and of the tests publishes a
# cached image in place of its catalog entry's stand-in. Needs root and
# debootstrap (Debian: apt-get install debootstrap); prints the cache
# directory. A cold build takes about 5.5 minutes (PyTorch is most of it);
# later calls return at once.
#
#   python:3.11-debian12       Debian's minbase with Python 3.11: the others' base
#   jupyter:6.4-debian12       Debian's Jupyter Notebook 6.4 and an IPython kernel
#   pytorch-cpu:1.13-debian12  Debian's CPU PyTorch 1.13 and a small training
#                              script that checkpoints and resumes
#                              (pytorch-cpu/train.py, at /opt/gantry/)
#   llm-server:0.1-debian12    a small OpenAI-style inference server on Python's
#                              standard library (llm-server/server.py)
#   postgres:15-debian12       Debian's PostgreSQL 15, no cluster made: the
#                              database beside Gantry's own pod in the e2e test
#                              of the chart on the real node
set -euo pipefail
cd "$(dirname "$0")"
SUITE=bookworm
# RECIPE is the version of how image() builds: bump it when a change to it
# should rebuild every cached image.
RECIPE=3
MIRROR=${GANTRY_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${GANTRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gantry}/images
mkdir -p "$cache"

# image NAME TAG BASE PACKAGES...: a root filesystem — with BASE "-" a
# minbase Debian with python3 (debootstrap), else BASE's cached layer
# (NAME/TAG) unpacked — then PACKAGES installed with apt (debootstrap's own
# resolver cannot pick providers of virtual packages), Gantry's Python
# client (api/python/gantry) on Python's path of an image with a base, the
# files of deploy/images/NAME/ (scripts) copied to /opt/gantry/, caches and
# documentation left out. An image is rebuilt when what it is built from
# changes: the recipe, the suite, BASE's layer, the packages, the client or
# those files (the "inputs" hash in layer.json).
image() {
  local name=$1 tag=$2 base=$3 dir="$cache/$1/$2"
  shift 3
  local inputs
  inputs=$( {
    echo "$RECIPE $SUITE $base $*"
    if [ "$base" != - ]; then grep -o '"digest": "[^"]*"' "$cache/$base/layer.json" 2>/dev/null || echo "no base"; fi
    if [ -d "$name" ]; then (cd "$name" && find . -type f | LC_ALL=C sort | xargs -r sha256sum); fi
    if [ "$base" != - ]; then (cd ../../api/python && find gantry -name '*.py' | LC_ALL=C sort | xargs sha256sum); fi
  } | sha256sum | cut -d' ' -f1)
  [ -s "$dir/layer.json" ] && grep -q "\"inputs\": \"$inputs\"" "$dir/layer.json" && return 0
  if [ "$(id -u)" -ne 0 ] || ! command -v debootstrap >/dev/null; then
    unbuilt+=("$name:$tag") # said in one line at the end
    return 0
  fi
  if [ "$base" != - ] && [ ! -s "$cache/$base/layer.tar.gz" ]; then
    echo "images: $name:$tag not built: its base $base is not" >&2
    return 0
  fi
  echo "images: building $name:$tag from Debian's packages" >&2
  local start=$SECONDS tmp
  tmp=$(mktemp -d "$cache/.build-$name.XXXXXX")
  trap 'rm -rf "$tmp"' RETURN
  if [ "$base" = - ]; then
    debootstrap --variant=minbase --include=python3 "$SUITE" "$tmp/rootfs" "$MIRROR" > "$tmp/debootstrap.log" 2>&1 ||
      { tail -20 "$tmp/debootstrap.log" >&2; return 1; }
  else
    mkdir "$tmp/rootfs"
    tar --numeric-owner -xzf "$cache/$base/layer.tar.gz" -C "$tmp/rootfs"
  fi
  if [ $# -gt 0 ]; then
    cp /etc/resolv.conf "$tmp/rootfs/etc/resolv.conf"
    # Packages start no service in the build's chroot (a daemon started
    # there would run on this machine), and PostgreSQL makes no cluster.
    printf '#!/bin/sh\nexit 101\n' > "$tmp/rootfs/usr/sbin/policy-rc.d"
    chmod 755 "$tmp/rootfs/usr/sbin/policy-rc.d"
    mkdir -p "$tmp/rootfs/etc/postgresql-common"
    echo "create_main_cluster = false" > "$tmp/rootfs/etc/postgresql-common/createcluster.conf"
    chroot "$tmp/rootfs" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive chroot "$tmp/rootfs" apt-get install -y -qq --no-install-recommends "$@" > "$tmp/apt.log" 2>&1 ||
      { tail -20 "$tmp/apt.log" >&2; return 1; }
    chroot "$tmp/rootfs" apt-get clean
    rm -f "$tmp/rootfs/usr/sbin/policy-rc.d"
    [ -d "$tmp/rootfs/usr/share/postgresql-common" ] || rm -rf "$tmp/rootfs/etc/postgresql-common"
  fi
  if [ "$base" != - ]; then
    # Gantry's Python client (gantry.run reports a training run's progress).
    local site="$tmp/rootfs/usr/local/lib/python3.11/dist-packages"
    mkdir -p "$site/gantry"
    cp ../../api/python/gantry/*.py "$site/gantry/"
    chmod -R a+rX "$site"
  fi
  if [ -d "$name" ]; then
    mkdir -p "$tmp/rootfs/opt/gantry"
    cp -r "$name"/. "$tmp/rootfs/opt/gantry/"
    chmod -R a+rX "$tmp/rootfs/opt/gantry"
  fi
  rm -rf "$tmp/rootfs"/var/lib/apt/lists/* "$tmp/rootfs"/usr/share/doc/* "$tmp/rootfs"/usr/share/man/* \
    "$tmp/rootfs"/usr/share/locale/* "$tmp/rootfs"/var/log/* "$tmp/rootfs"/etc/resolv.conf
  mkdir -p "$tmp/out"
  # gzip -1: a third of -6's CPU for layers about a tenth larger, which
  # only ever travel over loopback; the uncompressed digest is taken on the
  # way in instead of decompressing the layer again.
  mkfifo "$tmp/layer.tar"
  sha256sum < "$tmp/layer.tar" | cut -d' ' -f1 > "$tmp/diffid" &
  local sum=$!
  tar --numeric-owner --sort=name --mtime=@0 -C "$tmp/rootfs" -cf - . |
    tee "$tmp/layer.tar" | gzip -1 -n > "$tmp/out/layer.tar.gz"
  wait "$sum"
  local digest diffid size
  digest=$(sha256sum < "$tmp/out/layer.tar.gz" | cut -d' ' -f1)
  diffid=$(cat "$tmp/diffid")
  [ ${#diffid} -eq 64 ] || { echo "images: $name:$tag: no digest of the uncompressed layer" >&2; return 1; }
  size=$(stat -c %s "$tmp/out/layer.tar.gz")
  printf '{"digest": "sha256:%s", "diffID": "sha256:%s", "size": %s, "inputs": "%s"}\n' "$digest" "$diffid" "$size" "$inputs" > "$tmp/out/layer.json"
  rm -rf "$dir"
  mkdir -p "$(dirname "$dir")"
  mv "$tmp/out" "$dir"
  echo "images: built $name:$tag in $((SECONDS - start))s ($((size / 1048576)) MiB compressed)" >&2
}

unbuilt=()
image python 3.11-debian12 -
image jupyter 6.4-debian12 python/3.11-debian12 jupyter-notebook python3-ipykernel
image pytorch-cpu 1.13-debian12 python/3.11-debian12 python3-torch
image llm-server 0.1-debian12 python/3.11-debian12
image postgres 15-debian12 python/3.11-debian12 postgresql-15
if [ ${#unbuilt[@]} -gt 0 ]; then
  echo "images: ${unbuilt[*]} not built (needs root and debootstrap): the local registry serves their stand-ins" >&2
fi
echo "$cache"
