// Package admission holds capstan's own admission plugins, served as
// validating admission webhooks: OpenShift's PodNodeConstraints.
package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/capstan-dev/capstan/internal/strictyaml"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// PodNodeConstraintsConfig is OpenShift's configuration of the plugin.
type PodNodeConstraintsConfig struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	// NodeSelectorLabelBlacklist lists the node labels that users without
	// the pods/binding permission may not select on.
	NodeSelectorLabelBlacklist []string `json:"nodeSelectorLabelBlacklist"`
}

// DefaultPodNodeConstraintsConfig blacklists kubernetes.io/hostname, as
// OpenShift does.
func DefaultPodNodeConstraintsConfig() *PodNodeConstraintsConfig {
	return &PodNodeConstraintsConfig{APIVersion: "v1", Kind: "PodNodeConstraintsConfig", NodeSelectorLabelBlacklist: []string{corev1.LabelHostname}}
}

// ParsePodNodeConstraintsConfig reads and checks a configuration file.
func ParsePodNodeConstraintsConfig(raw []byte) (*PodNodeConstraintsConfig, error) {
	c := &PodNodeConstraintsConfig{}
	if err := strictyaml.Decode(raw, c); err != nil {
		return nil, fmt.Errorf("does not parse: %w", err)
	}
	if c.Kind != "" && c.Kind != "PodNodeConstraintsConfig" {
		return nil, fmt.Errorf("kind %q, want PodNodeConstraintsConfig", c.Kind)
	}
	for i, l := range c.NodeSelectorLabelBlacklist {
		if strings.TrimSpace(l) == "" {
			return nil, fmt.Errorf("nodeSelectorLabelBlacklist[%d] is empty", i)
		}
	}
	return c, nil
}

// PodNodeConstraints denies node selection by nodeName, or by a
// blacklisted label, to users who may not bind pods themselves.
type PodNodeConstraints struct {
	client    kubernetes.Interface
	blacklist map[string]bool

	// decisions caches namespace-wide answers for a short time, as the
	// apiserver's webhook authorizer does, so that creating many pods does
	// not cost one SubjectAccessReview each.
	mu        sync.Mutex
	decisions map[string]cachedDecision
	now       func() time.Time
}

type cachedDecision struct {
	allowed bool
	expires time.Time
}

const decisionTTL = 10 * time.Second

// NewPodNodeConstraints checks permissions with SubjectAccessReviews
// through client.
func NewPodNodeConstraints(client kubernetes.Interface, cfg *PodNodeConstraintsConfig) *PodNodeConstraints {
	p := &PodNodeConstraints{client: client, blacklist: map[string]bool{}, decisions: map[string]cachedDecision{}, now: time.Now}
	for _, l := range cfg.NodeSelectorLabelBlacklist {
		p.blacklist[l] = true
	}
	return p
}

// podSpecOf extracts the pod spec of the kinds the plugin checks; DaemonSets
// are not checked (their pods must name nodes).
func podSpecOf(req *admissionv1.AdmissionRequest) (*corev1.PodSpec, error) {
	raw := req.Object.Raw
	switch req.Resource.Group + "/" + req.Resource.Resource {
	case "/pods":
		var o corev1.Pod
		return &o.Spec, json.Unmarshal(raw, &o)
	case "/podtemplates":
		var o corev1.PodTemplate
		return &o.Template.Spec, json.Unmarshal(raw, &o)
	case "/replicationcontrollers":
		var o corev1.ReplicationController
		if err := json.Unmarshal(raw, &o); err != nil || o.Spec.Template == nil {
			return nil, err
		}
		return &o.Spec.Template.Spec, nil
	case "apps/deployments":
		var o appsv1.Deployment
		return &o.Spec.Template.Spec, json.Unmarshal(raw, &o)
	case "apps/replicasets":
		var o appsv1.ReplicaSet
		return &o.Spec.Template.Spec, json.Unmarshal(raw, &o)
	case "apps/statefulsets":
		var o appsv1.StatefulSet
		return &o.Spec.Template.Spec, json.Unmarshal(raw, &o)
	case "batch/jobs":
		var o batchv1.Job
		return &o.Spec.Template.Spec, json.Unmarshal(raw, &o)
	case "batch/cronjobs":
		var o batchv1.CronJob
		return &o.Spec.JobTemplate.Spec.Template.Spec, json.Unmarshal(raw, &o)
	}
	return nil, nil
}

// Review decides one admission request; a nil result admits it.
func (p *PodNodeConstraints) Review(ctx context.Context, req *admissionv1.AdmissionRequest) (allowed bool, message string, err error) {
	if req.SubResource != "" {
		return true, "", nil
	}
	if req.Resource.Group == "" && req.Resource.Resource == "pods" && req.Operation != admissionv1.Create {
		return true, "", nil
	}
	spec, err := podSpecOf(req)
	if err != nil {
		return false, "", fmt.Errorf("decoding %s: %w", req.Resource.Resource, err)
	}
	if spec == nil {
		return true, "", nil
	}
	var labels []string
	for l := range spec.NodeSelector {
		if p.blacklist[l] {
			labels = append(labels, l)
		}
	}
	sort.Strings(labels)
	if spec.NodeName == "" && len(labels) == 0 {
		return true, "", nil
	}
	if isMirrorPodOfOwnNode(req, spec.NodeName) {
		return true, "", nil
	}
	ok, err := p.canBind(ctx, req)
	if err != nil {
		return false, "", err
	}
	if ok {
		return true, "", nil
	}
	switch {
	case spec.NodeName != "" && len(labels) == 0:
		return false, "node selection by nodeName is prohibited by policy for your role", nil
	case spec.NodeName == "":
		return false, fmt.Sprintf("node selection by label(s) %v is prohibited by policy for your role", labels), nil
	default:
		return false, fmt.Sprintf("node selection by nodeName and label(s) %v is prohibited by policy for your role", labels), nil
	}
}

// isMirrorPodOfOwnNode lets a kubelet create the mirror pod of a static
// pod on its own node.
func isMirrorPodOfOwnNode(req *admissionv1.AdmissionRequest, nodeName string) bool {
	if nodeName == "" || req.Resource.Resource != "pods" {
		return false
	}
	var pod corev1.Pod
	if json.Unmarshal(req.Object.Raw, &pod) != nil {
		return false
	}
	if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; !mirror {
		return false
	}
	return req.UserInfo.Username == "system:node:"+nodeName
}

// canBind asks the authorizer whether the requesting user may create
// pods/binding in the namespace: first namespace-wide (cached briefly),
// then, for a pod, for its name alone.
func (p *PodNodeConstraints) canBind(ctx context.Context, req *admissionv1.AdmissionRequest) (bool, error) {
	u := req.UserInfo
	key := strings.Join([]string{u.Username, u.UID, strings.Join(u.Groups, ","), req.Namespace}, "\x00")
	for k, v := range u.Extra {
		key += "\x00" + k + "=" + strings.Join(v, ",")
	}
	p.mu.Lock()
	d, ok := p.decisions[key]
	p.mu.Unlock()
	if !ok || p.now().After(d.expires) {
		allowed, err := p.review(ctx, req, "")
		if err != nil {
			return false, err
		}
		d = cachedDecision{allowed: allowed, expires: p.now().Add(decisionTTL)}
		p.mu.Lock()
		p.decisions[key] = d
		p.mu.Unlock()
	}
	if d.allowed || req.Resource.Resource != "pods" || req.Name == "" {
		return d.allowed, nil
	}
	return p.review(ctx, req, req.Name)
}

func (p *PodNodeConstraints) review(ctx context.Context, req *admissionv1.AdmissionRequest, name string) (bool, error) {
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range req.UserInfo.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: req.UserInfo.Username, UID: req.UserInfo.UID, Groups: req.UserInfo.Groups, Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: req.Namespace, Verb: "create",
			Resource: "pods", Subresource: "binding", Name: name},
	}}
	res, err := p.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1CreateOptions)
	if err != nil {
		return false, fmt.Errorf("checking pods/binding permission of %s: %w", req.UserInfo.Username, err)
	}
	return res.Status.Allowed, nil
}
