package cvo

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Machines are what `adm upgrade status` reads of the Machine Config
// Operator: the pools, the nodes, and the MachineConfigs the nodes run or
// are told to run (their release-image-version says which release).
type Machines struct {
	Pools          []mcfgv1.MachineConfigPool
	Nodes          []corev1.Node
	MachineConfigs []mcfgv1.MachineConfig
}

// The node annotations and values the status reads (the MCO's).
const (
	mcCurrentConfig    = "machineconfiguration.openshift.io/currentConfig"
	mcDesiredConfig    = "machineconfiguration.openshift.io/desiredConfig"
	mcState            = "machineconfiguration.openshift.io/state"
	mcReason           = "machineconfiguration.openshift.io/reason"
	mcDesiredDrain     = "machineconfiguration.openshift.io/desiredDrain"
	mcLastAppliedDrain = "machineconfiguration.openshift.io/lastAppliedDrain"
	mcReleaseVersion   = "machineconfiguration.openshift.io/release-image-version"
)

// A node's phase and assessment, in the order oc sorts them.
type nodePhase int

const (
	phaseDraining nodePhase = iota
	phaseUpdating
	phaseRebooting
	phasePaused
	phasePending
	phaseUpdated
)

var phaseNames = []string{"Draining", "Updating", "Rebooting", "Paused", "Pending", "Updated"}

type nodeAssessment int

const (
	nodeDegraded nodeAssessment = iota
	nodeUnavailable
	nodeProgressing
	nodeExcluded
	nodeOutdated
	nodeCompleted
)

var assessmentNames = []string{"Degraded", "Unavailable", "Progressing", "Excluded", "Outdated", "Completed"}

type nodeRow struct {
	name, version, estimate, message string
	assessment                       nodeAssessment
	phase                            nodePhase
	unavailable, degraded, updating  bool
	updated                          bool
}

type poolView struct {
	name       string
	master     bool
	assessment string
	completion float64
	nodes      []nodeRow
	// Counts for the pool's STATUS column.
	total, available, progressing, outdated, draining, excluded, degraded int
}

// poolViews assesses every pool's nodes against the update in history[0],
// the control plane's pool first.
func poolViews(cv *configv1.ClusterVersion, m *Machines, now time.Time) ([]poolView, []insight) {
	if m == nil {
		return nil, nil
	}
	pools := append([]mcfgv1.MachineConfigPool(nil), m.Pools...)
	sort.Slice(pools, func(i, j int) bool {
		if (pools[i].Name == "master") != (pools[j].Name == "master") {
			return pools[i].Name == "master"
		}
		if (pools[i].Name == "worker") != (pools[j].Name == "worker") {
			return pools[i].Name == "worker"
		}
		return pools[i].Name < pools[j].Name
	})
	selectors := map[string]labels.Selector{}
	for _, p := range pools {
		if s, err := metav1.LabelSelectorAsSelector(p.Spec.NodeSelector); err == nil && p.Spec.NodeSelector != nil && !s.Empty() {
			selectors[p.Name] = s
		}
	}
	// A node belongs to master, else to a custom pool, else to worker.
	owner := func(n *corev1.Node) string {
		set := labels.Set(n.Labels)
		if s := selectors["master"]; s != nil && s.Matches(set) {
			return "master"
		}
		for _, p := range pools {
			if p.Name != "master" && p.Name != "worker" && selectors[p.Name] != nil && selectors[p.Name].Matches(set) {
				return p.Name
			}
		}
		if s := selectors["worker"]; s != nil && s.Matches(set) {
			return "worker"
		}
		return ""
	}
	versions := map[string]string{}
	for _, mc := range m.MachineConfigs {
		versions[mc.Name] = mc.Annotations[mcReleaseVersion]
	}
	target := ""
	if len(cv.Status.History) > 0 {
		target = cv.Status.History[0].Version
	}
	var views []poolView
	var insights []insight
	for _, p := range pools {
		v := poolView{name: p.Name, master: p.Name == "master"}
		for i := range m.Nodes {
			n := &m.Nodes[i]
			if owner(n) != p.Name {
				continue
			}
			row, in := assessNode(&p, n, versions, target)
			v.nodes = append(v.nodes, row)
			insights = append(insights, in...)
		}
		sort.Slice(v.nodes, func(i, j int) bool {
			a, b := v.nodes[i], v.nodes[j]
			if a.assessment != b.assessment {
				return a.assessment < b.assessment
			}
			if a.phase != b.phase {
				return a.phase < b.phase
			}
			return a.name < b.name
		})
		v.count(&p)
		if v.excluded > 0 && p.Spec.Paused {
			insights = append(insights, insight{level: "Warning", impact: "Update Stalled",
				message: fmt.Sprintf("Outdated nodes in a paused pool '%s' will not be updated", p.Name)})
		}
		views = append(views, v)
	}
	return views, insights
}

// assessNode places a node in the update, as oc does: updated when its
// configuration is of the release being applied, updating when it is told
// to run one that is, and else pending (or paused).
func assessNode(pool *mcfgv1.MachineConfigPool, n *corev1.Node, versions map[string]string, target string) (nodeRow, []insight) {
	a := n.Annotations
	current, desired := a[mcCurrentConfig], a[mcDesiredConfig]
	currentVersion, desiredVersion := versions[current], versions[desired]
	updated := currentVersion != "" && currentVersion == target && (desired == "" || current == desired)
	updating := !updated && currentVersion != "" && desiredVersion != "" && desiredVersion == target
	state := a[mcState]
	degraded := desired != "" && (state == "Degraded" || state == "Unreconcilable")

	row := nodeRow{name: n.Name, version: currentVersion, updated: updated, updating: updating, degraded: degraded}
	switch {
	case updating && draining(n, state):
		row.phase = phaseDraining
	case updating && state == "Rebooting":
		row.phase = phaseRebooting
	case updating:
		row.phase = phaseUpdating
	case updated:
		row.phase = phaseUpdated
	case pool.Spec.Paused:
		row.phase = phasePaused
	default:
		row.phase = phasePending
	}
	switch row.phase {
	case phasePaused:
		row.assessment, row.estimate = nodeExcluded, "-"
	case phasePending:
		row.assessment, row.estimate = nodeOutdated, "?"
	case phaseDraining:
		row.assessment, row.estimate = nodeProgressing, "+10m"
	case phaseUpdating, phaseRebooting:
		row.assessment, row.estimate = nodeProgressing, "+5m"
	case phaseUpdated:
		row.assessment, row.estimate = nodeCompleted, "-"
	}
	var insights []insight
	reasons, messages, since := unavailability(n)
	row.unavailable = len(reasons) > 0
	if row.unavailable && !updating {
		row.assessment, row.message, row.estimate = nodeUnavailable, strings.Join(reasons, " | "), "?"
		if updated {
			row.estimate = "-"
		}
		insights = append(insights, insight{since, "Warning", "Update Speed", strings.Join(messages, " | ")})
	}
	if degraded {
		row.assessment, row.message, row.estimate = nodeDegraded, a[mcReason], "?"
		if updated {
			row.estimate = "-"
		}
		insights = append(insights, insight{level: "Error", impact: "Update Stalled", message: fmt.Sprintf("Node %s is degraded", n.Name)})
	}
	if len(n.Name) >= 8 {
		row.message = strings.ReplaceAll(row.message, n.Name, "<node>")
	}
	return row, insights
}

// draining: the daemon asked for a drain that is not done yet (or is
// about to start one).
func draining(n *corev1.Node, state string) bool {
	want, done := n.Annotations[mcDesiredDrain], n.Annotations[mcLastAppliedDrain]
	if want != "" && want != done && strings.HasPrefix(want, "drain-") {
		return true
	}
	return state == "Done"
}

// unavailability lists why a node cannot take work, as the MCO counts it:
// not ready, disk pressure, network unavailable, unschedulable, or its
// daemon at work. messages word them for the health section.
func unavailability(n *corev1.Node) (reasons, messages []string, since time.Time) {
	add := func(reason, message string, at time.Time) {
		reasons, messages = append(reasons, reason), append(messages, message)
		if !at.IsZero() && (since.IsZero() || at.Before(since)) {
			since = at
		}
	}
	for _, c := range n.Status.Conditions {
		switch {
		case c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue:
			add("Not ready", fmt.Sprintf("Node %s is not ready", n.Name), c.LastTransitionTime.Time)
		case c.Type == corev1.NodeDiskPressure && c.Status != corev1.ConditionFalse:
			add("Disk pressure", fmt.Sprintf("Node %s has disk pressure", n.Name), c.LastTransitionTime.Time)
		case c.Type == corev1.NodeNetworkUnavailable && c.Status != corev1.ConditionFalse:
			add("Network unavailable", fmt.Sprintf("Node %s has unavailable network", n.Name), c.LastTransitionTime.Time)
		}
	}
	if n.Spec.Unschedulable {
		add("Node is marked unschedulable", "Node is marked unschedulable", time.Time{})
	}
	if len(reasons) > 0 {
		return reasons, messages, since
	}
	a := n.Annotations
	done := a[mcCurrentConfig] != "" && a[mcCurrentConfig] == a[mcDesiredConfig] && a[mcState] == "Done"
	if !done && a[mcState] != "Degraded" && a[mcState] != "Unreconcilable" {
		add("Machine Config Daemon is processing the node", "Machine Config Daemon is processing the node", time.Time{})
	}
	return reasons, messages, since
}

// count fills the pool's STATUS counts and its assessment.
func (v *poolView) count(p *mcfgv1.MachineConfigPool) {
	v.total = len(v.nodes)
	updated, pending := 0, 0
	for _, n := range v.nodes {
		if !n.unavailable {
			v.available++
		}
		if n.degraded {
			v.degraded++
		}
		switch n.phase {
		case phasePaused:
			v.excluded++
			v.outdated++
		case phasePending:
			pending++
			v.outdated++
		case phaseDraining, phaseUpdating, phaseRebooting:
			if n.phase == phaseDraining {
				v.draining++
			}
			v.outdated++
			if !n.degraded {
				v.progressing++
			}
		case phaseUpdated:
			updated++
		}
	}
	switch {
	case updated == len(v.nodes):
		v.assessment = "Completed"
	case pending == len(v.nodes):
		v.assessment = "Pending"
	case v.degraded > 0:
		v.assessment = "Degraded"
	case v.excluded > 0:
		v.assessment = "Excluded"
	default:
		v.assessment = "Progressing"
	}
	if len(v.nodes) > 0 {
		v.completion = float64(updated) / float64(len(v.nodes)) * 100
	}
}

// writePools prints the WORKER POOL table.
func writePools(w io.Writer, pools []poolView) {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprint(tw, "\nWORKER POOL\tASSESSMENT\tCOMPLETION\tSTATUS\n")
	for _, p := range pools {
		if len(p.nodes) == 0 {
			fmt.Fprintf(tw, "%s\tEmpty\t\t%d Total\n", p.name, p.total)
			continue
		}
		status := fmt.Sprintf("%d Available, %d Progressing, %d Draining", p.available, p.progressing, p.draining)
		if p.excluded > 0 {
			status += fmt.Sprintf(", %d Excluded", p.excluded)
		}
		if p.degraded > 0 {
			status += fmt.Sprintf(", %d Degraded", p.degraded)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f%% (%d/%d)\t%s\n", p.name, p.assessment, p.completion, p.total-p.outdated, p.total, status)
	}
	tw.Flush()
}

// writeNodes prints a pool's node table: ten rows, and every node in
// trouble, unless detailed.
func writeNodes(w io.Writer, p poolView, detailed bool) {
	if len(p.nodes) == 0 {
		return
	}
	if p.master {
		if p.completion == 100 {
			fmt.Fprintf(w, "\nAll control plane nodes successfully updated to %s\n", p.nodes[0].version)
			return
		}
		fmt.Fprint(w, "\nControl Plane Nodes")
	} else {
		fmt.Fprintf(w, "\nWorker Pool Nodes: %s", p.name)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprint(tw, "\nNAME\tASSESSMENT\tPHASE\tVERSION\tEST\tMESSAGE\n")
	var total, completed, available, progressing, outdated, draining, excluded int
	for i, n := range p.nodes {
		if !detailed && i >= 10 && !n.degraded && (!n.unavailable || n.updating) {
			total++
			if n.updated {
				completed++
			} else {
				outdated++
			}
			if !n.unavailable {
				available++
			}
			if n.phase == phaseDraining {
				draining++
			}
			if n.phase == phasePaused {
				excluded++
			}
			if n.assessment == nodeProgressing {
				progressing++
			}
			continue
		}
		version := n.version
		if version == "" {
			version = "?"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.name, assessmentNames[n.assessment], phaseNames[n.phase], version, n.estimate, n.message)
	}
	tw.Flush()
	if total > 0 {
		fmt.Fprintf(w, "...\nOmitted additional %d Total, %d Completed, %d Available, %d Progressing, %d Outdated, %d Draining, %d Excluded, and 0 Degraded nodes.\nPass along --details=nodes to see all information.\n",
			total, completed, available, progressing, outdated, draining, excluded)
	}
}
