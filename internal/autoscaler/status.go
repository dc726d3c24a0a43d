package autoscaler

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
)

// StatusConfigMap is the ConfigMap the autoscaler reports in, with
// upstream's name, key ("status", YAML) and annotation.
const (
	StatusConfigMap         = "cluster-autoscaler-status"
	statusUpdatedAnnotation = "cluster-autoscaler.kubernetes.io/last-updated"
	statusTimeLayout        = "2006-01-02 15:04:05.999999999 -0700 MST"
)

// statusConfigMap reads the status ConfigMap, creating it when missing,
// and returns it with a reference for the autoscaler's own events.
func (a *Autoscaler) statusConfigMap(ctx context.Context) (*corev1.ConfigMap, *corev1.ObjectReference) {
	ref := &corev1.ObjectReference{Kind: "ConfigMap", APIVersion: "v1", Namespace: a.opts.Namespace, Name: StatusConfigMap}
	cms := a.client.CoreV1().ConfigMaps(a.opts.Namespace)
	cm, err := cms.Get(ctx, StatusConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: StatusConfigMap, Namespace: a.opts.Namespace},
			Data: map[string]string{"status": "autoscalerStatus: Initializing\n"}}, metav1.CreateOptions{})
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Reading the status ConfigMap")
		return nil, ref
	}
	ref.UID, ref.ResourceVersion = cm.UID, cm.ResourceVersion
	return cm, ref
}

// The status document, in upstream's schema (clusterstate/api).
type (
	statusDoc struct {
		Time             string            `json:"time"`
		AutoscalerStatus string            `json:"autoscalerStatus"`
		Message          string            `json:"message,omitempty"`
		ClusterWide      clusterWideStatus `json:"clusterWide"`
		NodeGroups       []nodeGroupStatus `json:"nodeGroups,omitempty"`
	}
	clusterWideStatus struct {
		Health    healthStatus    `json:"health"`
		ScaleUp   scaleUpStatus   `json:"scaleUp"`
		ScaleDown scaleDownStatus `json:"scaleDown"`
	}
	nodeGroupStatus struct {
		Name      string          `json:"name"`
		Health    healthStatus    `json:"health"`
		ScaleUp   scaleUpStatus   `json:"scaleUp"`
		ScaleDown scaleDownStatus `json:"scaleDown"`
	}
	healthStatus struct {
		Status              string     `json:"status"`
		NodeCounts          nodeCounts `json:"nodeCounts"`
		CloudProviderTarget *int       `json:"cloudProviderTarget,omitempty"`
		MinSize             *int       `json:"minSize,omitempty"`
		MaxSize             *int       `json:"maxSize,omitempty"`
		LastProbeTime       string     `json:"lastProbeTime"`
	}
	nodeCounts struct {
		Registered   registeredCounts `json:"registered"`
		Unregistered int              `json:"unregistered"`
	}
	registeredCounts struct {
		Total        int `json:"total"`
		Ready        int `json:"ready"`
		NotStarted   int `json:"notStarted"`
		BeingDeleted int `json:"beingDeleted"`
		Unready      struct {
			Total int `json:"total"`
		} `json:"unready"`
	}
	scaleUpStatus struct {
		Status        string       `json:"status"`
		BackoffInfo   *backoffInfo `json:"backoffInfo,omitempty"`
		LastProbeTime string       `json:"lastProbeTime"`
	}
	backoffInfo struct {
		ErrorCode    string `json:"errorCode"`
		ErrorMessage string `json:"errorMessage"`
	}
	scaleDownStatus struct {
		Status        string `json:"status"`
		Candidates    int    `json:"candidates,omitempty"`
		LastProbeTime string `json:"lastProbeTime"`
	}
)

// countNodes counts registered nodes that have started, notStarted more
// that have not (they are among the upcoming), and the upcoming ones.
func countNodes(list []*corev1.Node, notStarted, upcoming int) nodeCounts {
	var c nodeCounts
	c.Registered.Total, c.Registered.NotStarted = notStarted, notStarted
	for _, n := range list {
		c.Registered.Total++
		switch {
		case hasToBeDeletedTaint(n):
			c.Registered.BeingDeleted++
		case NodeReady(n):
			c.Registered.Ready++
		default:
			c.Registered.Unready.Total++
		}
	}
	c.Unregistered = max(0, upcoming-notStarted)
	return c
}

// writeStatus writes the loop's outcome into the status ConfigMap.
func (a *Autoscaler) writeStatus(ctx context.Context, st *clusterState, plan *ScaleUpPlan, down *ScaleDownPlan) {
	now := a.opts.Clock.Now()
	probe := now.UTC().Format(time.RFC3339)
	notStarted, upcoming := st.notStartedAndUpcoming()
	doc := statusDoc{Time: now.Format(statusTimeLayout), AutoscalerStatus: "Running"}
	doc.ClusterWide.Health = healthStatus{Status: "Healthy", NodeCounts: countNodes(st.nodes, notStarted, upcoming), LastProbeTime: probe}
	doc.ClusterWide.ScaleUp = scaleUpStatus{Status: scaleUpState(plan, upcoming), LastProbeTime: probe}
	candidates := map[*NodeGroup]int{}
	total := 0
	if down != nil {
		for _, v := range down.Verdicts {
			if v.Unneeded {
				candidates[v.Group]++
				total++
			}
		}
	}
	doc.ClusterWide.ScaleDown = scaleDownState(total, probe)
	for _, g := range st.groups {
		gs := nodeGroupStatus{Name: g.ID}
		target, minS, maxS := g.Target, g.Min, g.Max
		gs.Health = healthStatus{Status: "Healthy", NodeCounts: countNodes(g.Nodes, len(g.NotStarted), g.Upcoming()),
			CloudProviderTarget: &target, MinSize: &minS, MaxSize: &maxS, LastProbeTime: probe}
		gs.ScaleUp = scaleUpStatus{Status: "NoActivity", LastProbeTime: probe}
		if g.Upcoming() > 0 {
			gs.ScaleUp.Status = "InProgress"
		}
		if off, why := a.backoff.backedOff(g.ID, now); off {
			gs.ScaleUp.Status = "Backoff"
			gs.ScaleUp.BackoffInfo = &backoffInfo{ErrorCode: "scaleUpFailed", ErrorMessage: why}
		}
		gs.ScaleDown = scaleDownState(candidates[g], probe)
		doc.NodeGroups = append(doc.NodeGroups, gs)
	}
	raw, err := yaml.Marshal(doc)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Encoding the status")
		return
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"data":{"status":%q}}`, statusUpdatedAnnotation, doc.Time, string(raw))
	if _, err := a.client.CoreV1().ConfigMaps(a.opts.Namespace).Patch(ctx, StatusConfigMap, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		klog.FromContext(ctx).Error(err, "Writing the status ConfigMap")
	}
}

func scaleDownState(candidates int, probe string) scaleDownStatus {
	s := scaleDownStatus{Status: "NoCandidates", Candidates: candidates, LastProbeTime: probe}
	if candidates > 0 {
		s.Status = "CandidatesPresent"
	}
	return s
}

func scaleUpState(plan *ScaleUpPlan, upcoming int) string {
	switch {
	case plan != nil && len(plan.Increases) > 0, upcoming > 0:
		return "InProgress"
	case plan != nil:
		for _, v := range plan.Verdicts {
			if v.Verdict == VerdictNotTriggered || v.Verdict == VerdictAwaiting {
				return "Needed"
			}
		}
	}
	return "NoActivity"
}

// ToBeDeletedTaint marks a node the autoscaler is removing (upstream's).
const ToBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

func hasToBeDeletedTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == ToBeDeletedTaint {
			return true
		}
	}
	return false
}
