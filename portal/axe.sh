#!/usr/bin/env bash
# Installs axe-core (the accessibility engine the browser tests run in the
# portal's pages) from the npm registry into a cache keyed by its version
# (default ~/.cache/gantry/axe-core-<version>) and prints the path of
# axe.min.js. Later calls return at once.
set -euo pipefail
AXE_VERSION=4.14.1
cache=${GANTRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gantry}
dir="$cache/axe-core-$AXE_VERSION"
js="$dir/node_modules/axe-core/axe.min.js"
if [ ! -f "$js" ]; then
  command -v npm >/dev/null || { echo "axe.sh: npm is needed (apt-get install npm)" >&2; exit 1; }
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
  (cd "$dir.tmp" && echo '{"private":true}' > package.json &&
    npm install --no-audit --no-fund --loglevel=error "axe-core@$AXE_VERSION" >/dev/null)
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
fi
echo "$js"
