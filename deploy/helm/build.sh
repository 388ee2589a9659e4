#!/usr/bin/env bash
# Builds Helm into a cache keyed by its version and the module it is built
# from (default ~/.cache/gantry/helm-<version>-<key>/helm) and prints the
# binary's path. Helm is a tool of the local cluster's module
# (deploy/cluster/go.mod), built with the same flags as the cluster's
# binaries, so it shares their Kubernetes libraries (kubectl's, client-go)
# in the Go build cache: about a minute cold after them, at once later.
set -euo pipefail
cd "$(dirname "$0")"
HELM_VERSION=v4.3.1
key=$(cat build.sh ../cluster/go.mod ../cluster/go.sum | sha256sum | cut -c1-12)
cache=${GANTRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gantry}
dir="$cache/helm-$HELM_VERSION-$key"
if [ ! -x "$dir/helm" ]; then
  if ! grep -q "helm.sh/helm/v4 $HELM_VERSION\b" ../cluster/go.mod; then
    echo "helm: deploy/cluster/go.mod does not require helm.sh/helm/v4 $HELM_VERSION" >&2
    exit 1
  fi
  rm -rf "$dir.tmp"
  mkdir -p "$dir.tmp"
  echo "helm: building $HELM_VERSION into $dir (first time: about a minute after the cluster's binaries)" >&2
  start=$(date +%s)
  (cd ../cluster && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" -o "$dir.tmp/helm" helm.sh/helm/v4/cmd/helm)
  echo "helm: built in $(( $(date +%s) - start ))s" >&2
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
fi
echo "$dir/helm"
