#!/usr/bin/env bash
# Regenerates crds.yaml from KubeVirt's source (its module, from the Go module
# proxy): the VirtualMachine and VirtualMachineInstance CRDs with KubeVirt's
# own schemas. Bump KUBEVIRT_VERSION to follow a KubeVirt release.
set -euo pipefail
cd "$(dirname "$0")"
KUBEVIRT_VERSION=v1.7.0
dir=$(cd /tmp && go mod download -json "kubevirt.io/kubevirt@$KUBEVIRT_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
go run gen.go "$KUBEVIRT_VERSION" "$dir/pkg/virt-operator/resource/generate/components/validations_generated.go" > crds.yaml
echo "wrote $(pwd)/crds.yaml ($(wc -l < crds.yaml) lines) from KubeVirt $KUBEVIRT_VERSION"
