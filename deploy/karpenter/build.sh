#!/usr/bin/env bash
# Builds Karpenter with its kwok cloud provider (sigs.k8s.io/karpenter/kwok)
# from its Go module into a cache keyed by its version (default
# ~/.cache/gantry/karpenter-<version>-<key>), copies its CRDs next to it, and
# prints that directory: bin/karpenter-kwok and crds/*.yaml. Karpenter needs a
# newer Go than the project's (its go.mod says 1.26.10): GOTOOLCHAIN fetches
# that toolchain through the module proxy for this build only. A cold build
# takes about 6 minutes on 2 cores; later calls return at once.
set -euo pipefail
cd "$(dirname "$0")"
KARPENTER_VERSION=v1.14.3
TOOLCHAIN=go1.27.3
key=$(cat build.sh | sha256sum | cut -c1-12)
cache=${GANTRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gantry}
dir="$cache/karpenter-$KARPENTER_VERSION-$key"
if [ ! -x "$dir/bin/karpenter-kwok" ] || [ ! -d "$dir/crds" ]; then
  rm -rf "$dir.tmp"
  mkdir -p "$dir.tmp/bin" "$dir.tmp/crds"
  echo "karpenter: building $KARPENTER_VERSION (kwok provider, $TOOLCHAIN) into $dir (first time: about 6 minutes)" >&2
  start=$(date +%s)
  (cd "$dir.tmp" && GOTOOLCHAIN=$TOOLCHAIN GOBIN="$dir.tmp/bin" GOFLAGS= CGO_ENABLED=0 \
    go install -trimpath -ldflags "-s -w" "sigs.k8s.io/karpenter/kwok@$KARPENTER_VERSION")
  mv "$dir.tmp/bin/kwok" "$dir.tmp/bin/karpenter-kwok"
  src=$(cd "$dir.tmp" && GOTOOLCHAIN=$TOOLCHAIN GOFLAGS= go mod download -json "sigs.k8s.io/karpenter@$KARPENTER_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  cp "$src"/pkg/apis/crds/karpenter.sh_*.yaml "$src"/kwok/apis/crds/*.yaml "$dir.tmp/crds/"
  chmod -R u+w "$dir.tmp/crds"
  echo "karpenter: built in $(( $(date +%s) - start ))s" >&2
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
fi
echo "$dir"
