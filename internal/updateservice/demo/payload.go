package demo

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Operator is a cluster operator of a demo release: its manifests are
// 0000_<RunLevel>_<Component>_*, its workload the Deployment Namespace/
// Deployment, which reports the ClusterOperator Name.
type Operator struct {
	RunLevel, Component, Name, Namespace, Deployment string
	// Capability, when set, is the optional capability the operator
	// belongs to (capability.openshift.io/name on each of its manifests,
	// as OpenShift's are): a cluster without it does not install it.
	Capability string
	// Extra ConfigMaps the operator ships (for payloads of a real
	// release's size).
	Extra int
}

// Operators are the demo release's cluster operators, at the run levels
// a real release puts them.
var Operators = []Operator{
	{RunLevel: "10", Component: "config-operator", Name: "config-operator", Namespace: "openshift-config-operator", Deployment: "openshift-config-operator"},
	{RunLevel: "20", Component: "kube-apiserver-operator", Name: "kube-apiserver", Namespace: "openshift-kube-apiserver-operator", Deployment: "kube-apiserver-operator"},
	{RunLevel: "25", Component: "kube-controller-manager-operator", Name: "kube-controller-manager", Namespace: "openshift-kube-controller-manager-operator", Deployment: "kube-controller-manager-operator"},
	{RunLevel: "25", Component: "kube-scheduler-operator", Name: "kube-scheduler", Namespace: "openshift-kube-scheduler-operator", Deployment: "openshift-kube-scheduler-operator"},
	{RunLevel: "30", Component: "machine-api-operator", Name: "machine-api", Namespace: "openshift-machine-api", Deployment: "machine-api-operator", Capability: "MachineAPI"},
	{RunLevel: "50", Component: "cluster-autoscaler-operator", Name: "cluster-autoscaler", Namespace: "openshift-machine-api", Deployment: "cluster-autoscaler-operator", Capability: "MachineAPI"},
	{RunLevel: "50", Component: "console-operator", Name: "console", Namespace: "openshift-console-operator", Deployment: "console-operator", Capability: "Console"},
	{RunLevel: "50", Component: "cluster-ingress-operator", Name: "ingress", Namespace: "openshift-ingress-operator", Deployment: "ingress-operator", Capability: "Ingress"},
	{RunLevel: "70", Component: "dns-operator", Name: "dns", Namespace: "openshift-dns-operator", Deployment: "dns-operator"},
	{RunLevel: "80", Component: "machine-config-operator", Name: "machine-config", Namespace: "openshift-machine-config-operator", Deployment: "machine-config-operator"},
}

// Labels and settings the payload's workloads carry.
const (
	// OperatorLabel on a Deployment names the ClusterOperator its
	// operator reports.
	OperatorLabel = "capstan.dev/cluster-operator"
	// VersionEnv is the release version an operator's Deployment runs
	// (as OpenShift's operators read RELEASE_VERSION).
	VersionEnv = "RELEASE_VERSION"
	// CVONamespace and CVODeployment are the CVO's own workload.
	CVONamespace  = "openshift-cluster-version"
	CVODeployment = "cluster-version-operator"
	// ReleaseNoteCRD is the demo CustomResourceDefinition (run level 03)
	// whose ReleaseNote the config operator ships (run level 10).
	ReleaseNoteCRD = "releasenotes.demo.capstan.dev"
)

const include = "    include.release.openshift.io/self-managed-high-availability: \"true\"\n"

// componentImage is a component's pull spec in a release: a digest made
// from the component and the version, as a build would give.
func componentImage(component, version string) string {
	sum := sha256.Sum256([]byte(component + "@" + version))
	return fmt.Sprintf("quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:%x", sum)
}

// WriteSource writes the source directory of a release of version with
// ops: the CVO's own manifests (manifests/: its namespace and Deployment,
// run level 00), a CustomResourceDefinition at run level 03, and for each
// operator its namespace, Deployment, extra ConfigMaps and ClusterOperator,
// plus image-references listing every component by digest. With v, the
// release also carries the verification ConfigMap that its CVO verifies
// the next release with; without, its CVO verifies nothing (every update
// from it must be forced).
func WriteSource(dir, version string, ops []Operator, v *Verification) error {
	files := map[string]string{}
	if v != nil {
		raw, err := v.Manifest()
		if err != nil {
			return err
		}
		files[VerificationFile] = string(raw)
	}
	files["manifests/0000_00_cluster-version-operator_00_namespace.yaml"] = namespace(CVONamespace, include)
	files["manifests/0000_00_cluster-version-operator_03_deployment.yaml"] = deployment(CVONamespace, CVODeployment, "", componentImage("cluster-version-operator", version), version, include)
	files["0000_03_config-operator_01_releasenote.crd.yaml"] = releaseNoteCRD
	images := []string{"cluster-version-operator"}
	for _, op := range ops {
		prefix := fmt.Sprintf("0000_%s_%s_", op.RunLevel, op.Component)
		ann := include
		if op.Capability != "" {
			ann += fmt.Sprintf("    capability.openshift.io/name: %s\n", op.Capability)
		}
		files[prefix+"00_namespace.yaml"] = namespace(op.Namespace, ann)
		for i := range op.Extra {
			files[fmt.Sprintf("%s01_config-%03d.yaml", prefix, i)] = configMap(op.Namespace, fmt.Sprintf("%s-config-%03d", op.Component, i), version, ann)
		}
		if op.Component == "config-operator" {
			files[prefix+"02_releasenote.yaml"] = fmt.Sprintf("apiVersion: demo.capstan.dev/v1\nkind: ReleaseNote\nmetadata:\n  name: cluster\n  annotations:\n%sspec:\n  version: %q\n", include, version)
		}
		if op.Name == "machine-config" {
			// The release's machine OS, which the MCO renders into every
			// pool's configuration: a new one rolls the nodes.
			raw, err := yaml.Marshal(OSImageURLConfigMap(op.Namespace, version))
			if err != nil {
				return err
			}
			files[prefix+"03_osimageurl.yaml"] = string(raw)
		}
		files[prefix+"05_deployment.yaml"] = deployment(op.Namespace, op.Deployment, op.Name, componentImage(op.Component, version), version, ann)
		files[prefix+"10_clusteroperator.yaml"] = fmt.Sprintf("apiVersion: config.openshift.io/v1\nkind: ClusterOperator\nmetadata:\n  name: %s\n  annotations:\n%sstatus:\n  versions:\n  - name: operator\n    version: %q\n", op.Name, ann, version)
		images = append(images, op.Component)
	}
	var refs strings.Builder
	fmt.Fprintf(&refs, "kind: ImageStream\napiVersion: image.openshift.io/v1\nmetadata:\n  name: %q\nspec:\n  tags:\n", version)
	for _, c := range images {
		fmt.Fprintf(&refs, "  - name: %s\n    from:\n      kind: DockerImage\n      name: %s\n", c, componentImage(c, version))
	}
	fmt.Fprintf(&refs, "  - name: machine-os\n    annotations:\n      io.openshift.build.versions: machine-os=%s\n      io.openshift.build.version-display-names: machine-os=Red Hat Enterprise Linux CoreOS\n    from:\n      kind: DockerImage\n      name: %s\n",
		machineOSVersion(version), componentImage("machine-os", version))
	files["image-references"] = refs.String()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// OSImageURLConfigMap is the ConfigMap machine-config-osimageurl of a
// release of version in the MCO's namespace: the machine OS images the
// MCO renders into every pool's configuration.
func OSImageURLConfigMap(namespace, version string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "machine-config-osimageurl", Namespace: namespace,
			Annotations: map[string]string{"include.release.openshift.io/self-managed-high-availability": "true"}},
		Data: map[string]string{
			"releaseVersion":                 version,
			"baseOSContainerImage":           componentImage("machine-os", version),
			"baseOSExtensionsContainerImage": componentImage("machine-os-extensions", version),
			"osImageURL":                     "",
		},
	}
}

// machineOSVersion is the RHCOS build of a release, as 4.10's are named.
func machineOSVersion(version string) string {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 3 {
		return version
	}
	return fmt.Sprintf("%s%s.92.202207%s0000-0", parts[0], parts[1], parts[2])
}

func namespace(name, ann string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  annotations:\n%s    openshift.io/node-selector: \"\"\n  labels:\n    openshift.io/cluster-monitoring: \"true\"\n", name, ann)
}

func configMap(ns, name, version, ann string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s\n  annotations:\n%sdata:\n  version: %q\n", name, ns, ann, version)
}

// deployment is an operator's workload: one replica on the control plane,
// tolerating its taint, with the release version in its environment.
func deployment(ns, name, clusterOperator, image, version, ann string) string {
	label := ""
	if clusterOperator != "" {
		label = fmt.Sprintf("  labels:\n    %s: %s\n", OperatorLabel, clusterOperator)
	}
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[2]s
  namespace: %[1]s
%[3]s  annotations:
%[6]sspec:
  replicas: 1
  selector:
    matchLabels:
      app: %[2]s
  template:
    metadata:
      labels:
        app: %[2]s
      annotations:
        # An operator stops within a second of SIGTERM, so a drain
        # moves it quickly.
        sim.capstan.dev/shutdown-seconds: "1"
    spec:
      priorityClassName: system-cluster-critical
      nodeSelector:
        node-role.kubernetes.io/master: ""
      tolerations:
      - key: node-role.kubernetes.io/master
        operator: Exists
        effect: NoSchedule
      - key: node.kubernetes.io/unreachable
        operator: Exists
        effect: NoExecute
        tolerationSeconds: 120
      - key: node.kubernetes.io/not-ready
        operator: Exists
        effect: NoExecute
        tolerationSeconds: 120
      containers:
      - name: operator
        image: %[4]s
        env:
        - name: %[7]s
          value: %[5]q
        resources:
          requests:
            cpu: 10m
            memory: 50Mi
`, ns, name, label, image, version, ann, VersionEnv)
}

const releaseNoteCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: releasenotes.demo.capstan.dev
  annotations:
    include.release.openshift.io/self-managed-high-availability: "true"
spec:
  group: demo.capstan.dev
  scope: Cluster
  names:
    kind: ReleaseNote
    listKind: ReleaseNoteList
    plural: releasenotes
    singular: releasenote
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              version:
                type: string
`
