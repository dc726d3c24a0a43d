#!/usr/bin/env bash
# Builds the upstream binaries capstan's simulation is measured against
# (test/e2e TestASimulatedZoneOutageAgreesWithUpstreamsSchedulerAndAutoscaler):
# kube-scheduler from the Kubernetes module capstan links (go.mod pins it),
# and the cluster-autoscaler from a checkout of kubernetes/autoscaler, with
# the clusterapi provider only, which OpenShift runs on the Machine API.
#
#   hack/peer-binaries.sh OUT_DIR [AUTOSCALER_CHECKOUT]
#
# Without a checkout, it clones kubernetes/autoscaler at the commit the
# figures in docs/simulate.md were measured with. Then:
#
#   CAPSTAN_KUBE_SCHEDULER=OUT_DIR/kube-scheduler \
#   CAPSTAN_CLUSTER_AUTOSCALER=OUT_DIR/cluster-autoscaler \
#     go test ./test/e2e -run AgreesWithUpstreams -v
set -euo pipefail
out=${1:?usage: hack/peer-binaries.sh OUT_DIR [AUTOSCALER_CHECKOUT]}
src=${2:-}
# The last commit whose cluster-autoscaler module holds its core packages
# (later ones import them from sigs.k8s.io/cluster-autoscaler).
commit=a16f0ae8b5
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
(cd "$root" && go build -o "$out/kube-scheduler" k8s.io/kubernetes/cmd/kube-scheduler)
if [ -z "$src" ]; then
	src=$(mktemp -d)
	trap 'rm -rf "$src"' EXIT
	git clone --quiet --filter=blob:none https://github.com/kubernetes/autoscaler "$src"
	git -C "$src" checkout --quiet "$commit"
fi
(cd "$src/cluster-autoscaler" && go build -tags clusterapi -o "$out/cluster-autoscaler" .)
echo "built $out/kube-scheduler (k8s.io/kubernetes $(cd "$root" && go list -m -f '{{.Version}}' k8s.io/kubernetes))"
echo "built $out/cluster-autoscaler (kubernetes/autoscaler $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo "from $src"))"
