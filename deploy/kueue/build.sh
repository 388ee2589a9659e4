#!/usr/bin/env bash
# Builds Kueue's controller manager into a cache keyed by its version and the
# module it is built from (default ~/.cache/gantry/kueue-<version>-<key>),
# copies its CRDs next to it, and prints that directory: bin/kueue and
# crds/*.yaml. Kueue is a tool of deploy/controllers/go.mod, built with
# Karpenter's Go toolchain and flags, so that the two share their Kubernetes
# libraries and controller-runtime in the Go build cache (GOTOOLCHAIN fetches
# that toolchain through the module proxy for these builds only). A cold
# build takes about 7 minutes on 2 cores (5 once the toolchain and its
# standard library are there); later calls return at once.
set -euo pipefail
cd "$(dirname "$0")"
KUEUE_VERSION=v0.17.0
TOOLCHAIN=go1.27.3
key=$(cat build.sh ../controllers/go.mod ../controllers/go.sum | sha256sum | cut -c1-12)
cache=${GANTRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gantry}
dir="$cache/kueue-$KUEUE_VERSION-$key"
if [ ! -x "$dir/bin/kueue" ] || [ ! -d "$dir/crds" ]; then
  rm -rf "$dir.tmp"
  mkdir -p "$dir.tmp/bin" "$dir.tmp/crds"
  echo "kueue: building $KUEUE_VERSION into $dir (first time: about 7 minutes)" >&2
  start=$(date +%s)
  if ! grep -q "sigs.k8s.io/kueue $KUEUE_VERSION\b" ../controllers/go.mod; then
    echo "kueue: deploy/controllers/go.mod does not require sigs.k8s.io/kueue $KUEUE_VERSION" >&2
    exit 1
  fi
  (cd ../controllers && GOTOOLCHAIN=$TOOLCHAIN GOFLAGS= CGO_ENABLED=0 \
    go build -trimpath -ldflags "-s -w" -o "$dir.tmp/bin/kueue" sigs.k8s.io/kueue/cmd/kueue)
  src=$(cd ../controllers && GOTOOLCHAIN=$TOOLCHAIN GOFLAGS= go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
  cp "$src"/config/components/crd/bases/*.yaml "$dir.tmp/crds/"
  chmod -R u+w "$dir.tmp/crds"
  echo "kueue: built in $(( $(date +%s) - start ))s" >&2
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
fi
echo "$dir"
