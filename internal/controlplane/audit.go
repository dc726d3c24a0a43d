package controlplane

import (
	"os"
	"path/filepath"

	"github.com/capstan-dev/capstan/internal/atomicfile"
)

// auditPolicy is what the apiserver records of each request: who did
// what to which object, and its answer (Metadata), at the end of the
// request. The lease renewals of kubelets and leaders (every node and
// component, every few seconds, and none of them a decision) and the
// health and discovery endpoints are left out.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  verbs: ["get", "update"]
  resources:
  - group: coordination.k8s.io
    resources: ["leases"]
- level: None
  nonResourceURLs: ["/healthz*", "/livez*", "/readyz*", "/version", "/openapi/*", "/api", "/api/*", "/apis", "/apis/*", "/metrics"]
- level: Metadata
`

// auditFlags turns the audit log on, with the policy above written into
// the data dir (rewritten at every start: it is capstan's, not the user's).
func (cp *ControlPlane) auditFlags() ([]string, error) {
	if cp.cfg.DisableAuditLog {
		return nil, nil
	}
	policy := cp.dataDir.Path("audit", "policy.yaml")
	if err := os.MkdirAll(filepath.Dir(policy), 0o700); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(policy, []byte(auditPolicy), 0o600); err != nil {
		return nil, err
	}
	return []string{
		"--audit-policy-file=" + policy,
		"--audit-log-path=" + cp.dataDir.AuditLogPath(),
		"--audit-log-format=json",
		// Batched, so that a busy cluster's requests do not wait on the
		// disk.
		"--audit-log-mode=batch",
		"--audit-log-maxsize=100",
		"--audit-log-maxbackup=2",
	}, nil
}
