#!/usr/bin/env bash
# Builds the kubelet of the local cluster's real node (the one node that runs
# containers, on containerd) into a cache keyed by its version (default
# ~/.cache/gantry/kubelet-<key>/bin) and prints that directory. Same module,
# version and flags as build.sh, so the Go build cache shares most of the work
# with kube-apiserver's; a cold build takes about 10-25 minutes on 2 cores.
# Kept apart from build.sh so that adding it did not change the other
# binaries' cache key.
set -euo pipefail
cd "$(dirname "$0")"
K8S_VERSION=v1.37.2
key=$(cat go.mod go.sum build-kubelet.sh | sha256sum | cut -c1-12)
cache=${GANTRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gantry}
bin="$cache/kubelet-$K8S_VERSION-$key/bin"
if [ ! -x "$bin/kubelet" ]; then
  mkdir -p "$bin.tmp"
  echo "cluster: building the kubelet into $bin (first time: about 10-25 minutes)" >&2
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"
  start=$(date +%s)
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin.tmp/kubelet" k8s.io/kubernetes/cmd/kubelet
  echo "cluster: built the kubelet in $(( $(date +%s) - start ))s" >&2
  mkdir -p "$bin"
  mv "$bin.tmp/kubelet" "$bin/"
  rmdir "$bin.tmp"
fi
echo "$bin"
