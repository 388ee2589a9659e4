#!/usr/bin/env bash
# Installs what the local cluster's real node runs on, from Debian's packages,
# where missing: containerd, runc, the CNI plugins, busybox-static (its
# images' shell and tools), iproute2, and debootstrap (deploy/images/build.sh
# builds the real images with it). As root only: otherwise it says what
# is missing, and the local cluster comes up without a real node.
set -euo pipefail
need=()
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "install ok installed" || need+=(busybox-static)
command -v ip >/dev/null || need+=(iproute2)
command -v nsenter >/dev/null || need+=(util-linux)
command -v debootstrap >/dev/null || need+=(debootstrap)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "real node: missing ${need[*]} (Debian: sudo apt-get install ${need[*]}); the local cluster starts without it" >&2
  exit 0
fi
echo "real node: installing ${need[*]}" >&2
apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
