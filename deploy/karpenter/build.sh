#!/usr/bin/env bash
# Builds Karpenter with its kwok cloud provider (sigs.k8s.io/karpenter/kwok)
# into a cache keyed by its version and the module it is built from (default
# ~/.cache/gantry/karpenter-<version>-<key>), copies its CRDs next to it, and
# prints that directory: bin/karpenter-kwok and crds/*.yaml. Karpenter is a
# tool of deploy/controllers/go.mod beside Kueue (built first, deploy/kueue),
# with whom it shares the Kubernetes libraries and controller-runtime in the
# Go build cache. It needs a newer Go than the project's (its go.mod says
# 1.26.10): GOTOOLCHAIN fetches that toolchain through the module proxy for
# these builds only. A cold build takes about a minute on 2 cores after
# Kueue's; later calls return at once.
set -euo pipefail
cd "$(dirname "$0")"
KARPENTER_VERSION=v1.14.3
TOOLCHAIN=go1.27.3
key=$(cat build.sh ../controllers/go.mod ../controllers/go.sum | sha256sum | cut -c1-12)
cache=${GANTRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gantry}
dir="$cache/karpenter-$KARPENTER_VERSION-$key"
if [ ! -x "$dir/bin/karpenter-kwok" ] || [ ! -d "$dir/crds" ]; then
  rm -rf "$dir.tmp"
  mkdir -p "$dir.tmp/bin" "$dir.tmp/crds"
  echo "karpenter: building $KARPENTER_VERSION (kwok provider, $TOOLCHAIN) into $dir (first time: about a minute after Kueue)" >&2
  start=$(date +%s)
  if ! grep -q "sigs.k8s.io/karpenter $KARPENTER_VERSION\b" ../controllers/go.mod; then
    echo "karpenter: deploy/controllers/go.mod does not require sigs.k8s.io/karpenter $KARPENTER_VERSION" >&2
    exit 1
  fi
  (cd ../controllers && GOTOOLCHAIN=$TOOLCHAIN GOFLAGS= CGO_ENABLED=0 \
    go build -trimpath -ldflags "-s -w" -o "$dir.tmp/bin/karpenter-kwok" sigs.k8s.io/karpenter/kwok)
  src=$(cd ../controllers && GOTOOLCHAIN=$TOOLCHAIN GOFLAGS= go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)
  cp "$src"/pkg/apis/crds/karpenter.sh_*.yaml "$src"/kwok/apis/crds/*.yaml "$dir.tmp/crds/"
  chmod -R u+w "$dir.tmp/crds"
  echo "karpenter: built in $(( $(date +%s) - start ))s" >&2
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
fi
echo "$dir"
