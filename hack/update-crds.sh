#!/usr/bin/env bash
# Copies, byte for byte, the CRD manifests capstan installs from the pinned
# github.com/openshift/api module into internal/controlplane/crds, where they
# are embedded into the binary. Run after changing the openshift/api version;
# TestCRDsMatchModule fails until you do.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(go list -m -f '{{.Dir}}' github.com/openshift/api)
dst=internal/controlplane/crds
rm -f "$dst"/*.yaml
while read -r f; do
  [ -n "$f" ] && cp "$src/$f" "$dst/$(basename "$f")"
done < "$dst/SOURCES"
chmod 0644 "$dst"/*.yaml
