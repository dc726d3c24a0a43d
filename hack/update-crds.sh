#!/usr/bin/env bash
# Copies, byte for byte, the CRD manifests capstan installs from the pinned
# github.com/openshift/api module into deploy/crds, where the deploy
# manifests and the binary (which embeds them) take them from. Run after changing the openshift/api version;
# TestCRDsMatchModule fails until you do.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(go list -m -f '{{.Dir}}' github.com/openshift/api)
dst=deploy/crds
find "$dst" -maxdepth 1 -name '*.yaml' ! -name kustomization.yaml -delete
while read -r f; do
  [ -n "$f" ] && cp "$src/$f" "$dst/$(basename "$f")"
done < "$dst/SOURCES"
chmod 0644 "$dst"/*.yaml
