package simulate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	configv1 "github.com/openshift/api/config/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/mco"
	"github.com/capstan-dev/capstan/internal/nodes"
	"github.com/capstan-dev/capstan/internal/operators"
	"github.com/capstan-dev/capstan/internal/updateservice/demo"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

// updatePlan is an update change read against the snapshot: the release
// the cluster runs, the one it would update to, and what the cluster's
// own CVO said of that update.
type updatePlan struct {
	From, To, Channel string
	// Conditional is an update the graph recommends only where its risks
	// do not apply; Risks are those, Recommended the cluster's
	// evaluation of them when the snapshot was taken.
	Conditional bool
	Risks       []configv1.ConditionalUpdateRisk
	Recommended *metav1.Condition
	// NotUpgradeable is the snapshot's Upgradeable=False condition: it
	// holds a minor update until its operator allows it.
	NotUpgradeable *configv1.ClusterOperatorStatusCondition
	// Others are the snapshot's ClusterOperators the simulated release
	// does not carry.
	Others []string
	// Held are the carried operators that said Upgradeable=False in the
	// snapshot ("Reason: message" by ClusterOperator): they say so in the
	// simulation too.
	Held map[string]string
}

var clusterVersionsGVR = resourceOf("ClusterVersion").GVR

// snapshotClusterVersion is the snapshot's ClusterVersion, nil on a
// cluster without one.
func snapshotClusterVersion(s *Snapshot) (*configv1.ClusterVersion, error) {
	objs, _ := s.Get(resourceOf("ClusterVersion"))
	for i := range objs {
		if objs[i].GetName() == cvo.Name {
			return typed[configv1.ClusterVersion](&objs[i])
		}
	}
	return nil, nil
}

// planUpdate reads an update to version against the snapshot: refused
// on a cluster without a ClusterVersion and for a release its graph does
// not offer.
func planUpdate(s *Snapshot, version string) (*updatePlan, error) {
	cv, err := snapshotClusterVersion(s)
	if err != nil {
		return nil, err
	}
	if cv == nil {
		return nil, errors.New("the snapshot has no ClusterVersion (a cluster without the Cluster Version Operator)")
	}
	p := &updatePlan{From: cv.Status.Desired.Version, To: version, Channel: cv.Spec.Channel}
	if _, err := semver.Parse(p.From); err != nil {
		return nil, fmt.Errorf("the snapshot's ClusterVersion runs %q, not a release version: %v", p.From, err)
	}
	if p.Channel == "" {
		return nil, errors.New("the snapshot's ClusterVersion has no channel: its cluster is offered no update")
	}
	if version == p.From {
		return nil, fmt.Errorf("the cluster already runs %s", version)
	}
	var offered []string
	found := false
	for _, r := range cv.Status.AvailableUpdates {
		offered = append(offered, r.Version)
		found = found || r.Version == version
	}
	for _, cu := range cv.Status.ConditionalUpdates {
		offered = append(offered, cu.Release.Version+" (conditional)")
		if cu.Release.Version != version || found {
			continue
		}
		found, p.Conditional = true, true
		p.Risks = append(p.Risks, cu.Risks...)
		for _, name := range cu.RiskNames {
			if slices.ContainsFunc(p.Risks, func(r configv1.ConditionalUpdateRisk) bool { return r.Name == name }) {
				continue
			}
			if i := slices.IndexFunc(cv.Status.ConditionalUpdateRisks, func(r configv1.ConditionalUpdateRisk) bool { return r.Name == name }); i >= 0 {
				p.Risks = append(p.Risks, cv.Status.ConditionalUpdateRisks[i])
			}
		}
		p.Recommended = meta.FindStatusCondition(cu.Conditions, "Recommended")
	}
	if !found {
		if len(offered) == 0 {
			offered = []string{"none"}
		}
		return nil, fmt.Errorf("%s is not an update the snapshot's graph offers from %s in channel %q (it offers: %s)",
			version, p.From, p.Channel, strings.Join(offered, ", "))
	}
	if c := cvo.FindCondition(cv.Status.Conditions, configv1.OperatorUpgradeable); c != nil && c.Status == configv1.ConditionFalse {
		p.NotUpgradeable = c
	}
	// The CVO reports ClusterOperator version itself.
	carried := map[string]bool{cvo.Name: true}
	for _, op := range demo.Operators {
		carried[op.Name] = true
	}
	p.Held = map[string]string{}
	cos, _ := s.Get(resourceOf("ClusterOperator"))
	for i := range cos {
		co, err := typed[configv1.ClusterOperator](&cos[i])
		if err != nil {
			return nil, err
		}
		if !carried[co.Name] {
			p.Others = append(p.Others, co.Name)
			continue
		}
		if c := cvo.FindCondition(co.Status.Conditions, configv1.OperatorUpgradeable); c != nil && c.Status == configv1.ConditionFalse {
			p.Held[co.Name] = c.Reason + ": " + c.Message
		}
	}
	sort.Strings(p.Others)
	return p, nil
}

// minor says whether the update goes to another minor version, which an
// Upgradeable=False condition holds.
func (p *updatePlan) minor() bool {
	from, _ := semver.Parse(p.From)
	to, _ := semver.Parse(p.To)
	return from.Major != to.Major || from.Minor != to.Minor
}

// checkUpdate refuses an update the snapshot cannot run: one its graph
// does not offer, or on a cluster without a Ready control-plane node for
// the release's operators.
func checkUpdate(s *Snapshot, c Change) error {
	if _, err := planUpdate(s, c.Version); err != nil {
		return fmt.Errorf("change %s: %w", c, err)
	}
	objs, _ := s.Get(resourceOf("Node"))
	for i := range objs {
		n, err := typed[corev1.Node](&objs[i])
		if err != nil {
			return err
		}
		if _, master := n.Labels[masterLabel]; master && nodes.Ready(n) {
			return nil
		}
	}
	return fmt.Errorf("change %s: the snapshot has no Ready node labelled %s, where the release's operators run", c, masterLabel)
}

const masterLabel = "node-role.kubernetes.io/master"

// updateOf is the run's update change, if it has one.
func updateOf(changes []Change) (Change, bool) {
	i := slices.IndexFunc(changes, func(c Change) bool { return c.Kind == ChangeUpdate })
	if i < 0 {
		return Change{}, false
	}
	return changes[i], true
}

// releaseOptions run the release half of the private cluster for an
// update: a registry with releases of the version the snapshot runs and
// of the target, built and signed as capstan's demo releases are, an
// update service whose graph is the snapshot's edge (a conditional one
// with the snapshot's risks), and a CVO installing the snapshot's
// version once the snapshot is restored (hold), on the simulation's
// clock.
func releaseOptions(p *updatePlan, speed float64, hold <-chan struct{}) *cluster.ReleaseOptions {
	o := cluster.DefaultReleaseOptions()
	o.Address = "127.0.0.1:0"
	o.Channel, o.InstallVersion = p.Channel, p.From
	o.Versions = []string{p.From, p.To}
	if from, to := semver.MustParse(p.From), semver.MustParse(p.To); to.LT(from) {
		o.Versions = []string{p.To, p.From}
	}
	o.GraphData = p.writeGraph
	o.Hold = hold
	c := &o.CVO
	c.Timeline = &cvo.Timeline{}
	c.ReconcileInterval = scaled(c.ReconcileInterval, speed)
	c.RetryInterval = scaled(c.RetryInterval, speed)
	c.MaxRetryInterval = scaled(c.MaxRetryInterval, speed)
	// A ClusterOperator is looked at every 500 ms, simulated: no
	// faster than ten times a second in real time.
	c.OperatorPollInterval = max(scaled(c.OperatorPollInterval, speed), 100*time.Millisecond)
	c.SlowOperatorAfter = scaled(c.SlowOperatorAfter, speed)
	c.SlowMachineConfigAfter = scaled(c.SlowMachineConfigAfter, speed)
	check := c.MinimumUpdateCheckInterval
	c.MinimumUpdateCheckInterval = func() time.Duration { return scaled(check(), speed) }
	return &o
}

// writeGraph writes the update graph of the plan: the snapshot's channel
// holding both releases and, for a conditional update, a blocked edge
// for each of its risks with the snapshot's matching rules.
func (p *updatePlan) writeGraph(dir string) error {
	files := map[string]any{
		"version": nil,
		filepath.Join("channels", p.Channel+".yaml"): map[string]any{"name": p.Channel, "versions": []string{p.From, p.To}},
	}
	for _, r := range p.Risks {
		rules := r.MatchingRules
		if len(rules) == 0 {
			rules = []configv1.ClusterCondition{{Type: "Always"}}
		}
		files[filepath.Join("blocked-edges", p.To+"-"+r.Name+".yaml")] = map[string]any{
			"to": p.To, "from": "^" + regexp.QuoteMeta(p.From) + "$", "url": r.URL, "name": r.Name, "message": r.Message, "matchingRules": rules}
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		raw := []byte("1.1.0\n")
		if content != nil {
			var err error
			if raw, err = yaml.Marshal(content); err != nil {
				return err
			}
		}
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// releaseConfigMap creates the machine OS ConfigMap of the release the
// snapshot runs, as its CVO would have applied it: the MCO renders the
// restored pools from it before the CVO starts.
func (r *restorer) releaseConfigMap(ctx context.Context) error {
	if r.update == nil {
		return nil
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mco.Namespace}}
	if _, err := r.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", mco.Namespace, err)
	}
	cm := demo.OSImageURLConfigMap(mco.Namespace, r.update.From)
	if _, err := r.kube.CoreV1().ConfigMaps(mco.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("ConfigMap %s/%s: %w", mco.Namespace, cm.Name, err)
	}
	return nil
}

// clusterVersion reads the private cluster's ClusterVersion.
func (a *applier) clusterVersion(ctx context.Context) (*configv1.ClusterVersion, error) {
	u, err := a.dyn.Resource(clusterVersionsGVR).Get(ctx, cvo.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return typed[configv1.ClusterVersion](u)
}

// waitInstalled waits until the CVO has applied the release the snapshot
// runs, so that the changes begin on a cluster at rest.
func (a *applier) waitInstalled(ctx context.Context, version string) error {
	return waitfor.Poll(ctx, 200*time.Millisecond, 10*time.Minute, waitfor.Simple(func(ctx context.Context) (bool, string) {
		cv, err := a.clusterVersion(ctx)
		if err != nil {
			return false, err.Error()
		}
		if len(cv.Status.History) > 0 && cv.Status.History[0].Version == version && cv.Status.History[0].State == configv1.CompletedUpdate {
			return true, ""
		}
		return false, "the CVO has not applied " + version + ": " + describeProgress(cv)
	}))
}

// describeProgress is the ClusterVersion's Progressing and Failing
// conditions in a line.
func describeProgress(cv *configv1.ClusterVersion) string {
	var parts []string
	for _, t := range []configv1.ClusterStatusConditionType{configv1.OperatorProgressing, cvo.Failing} {
		if c := cvo.FindCondition(cv.Status.Conditions, t); c != nil {
			parts = append(parts, strings.TrimSpace(fmt.Sprintf("%s=%s %s", t, c.Status, c.Message)))
		}
	}
	if len(parts) == 0 {
		return "no conditions yet"
	}
	return strings.Join(parts, "; ")
}

// holdUpgradeable makes each operator that said Upgradeable=False in the
// snapshot say it again in the simulation, with its reason and message:
// the CVO then holds a minor update as the cluster's would.
func (a *applier) holdUpgradeable(ctx context.Context) error {
	for _, op := range demo.Operators {
		msg, ok := a.plan.Held[op.Name]
		if !ok {
			continue
		}
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, operators.NotUpgradeableAnnotation, msg)
		if _, err := a.kube.AppsV1().Deployments(op.Namespace).Patch(ctx, op.Deployment, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("ClusterOperator %s: %w", op.Name, err)
		}
	}
	return nil
}

// update asks the private cluster's CVO for the release, as `oc adm
// upgrade --to VERSION --allow-not-recommended` does: once its update
// service offers it, the ClusterVersion's desired update names it.
func (a *applier) update(ctx context.Context, c Change) error {
	var image string
	err := waitfor.Poll(ctx, 200*time.Millisecond, 2*time.Minute, waitfor.Simple(func(ctx context.Context) (bool, string) {
		cv, err := a.clusterVersion(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, r := range cv.Status.AvailableUpdates {
			if r.Version == c.Version {
				image = r.Image
			}
		}
		for _, cu := range cv.Status.ConditionalUpdates {
			if cu.Release.Version == c.Version {
				image = cu.Release.Image
			}
		}
		return image != "", "the simulation's CVO does not offer " + c.Version + " yet"
	}))
	if err != nil {
		return err
	}
	patch := fmt.Appendf(nil, `{"spec":{"desiredUpdate":{"version":%q,"image":%q}}}`, c.Version, image)
	if _, err := a.dyn.Resource(clusterVersionsGVR).Patch(ctx, cvo.Name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("setting the desired update: %w", err)
	}
	a.updating.Store(true)
	return nil
}

// updateBusy says whether the CVO took the update on and has not
// completed it: the cluster is not settled while it runs. (An update the
// CVO refused, held by a precondition, is where the cluster rests.)
func (a *applier) updateBusy() bool {
	if a.timeline == nil || !a.updating.Load() || a.plan == nil {
		return false
	}
	p := a.timeline.Pass(a.plan.To)
	return !p.Accepted.IsZero() && p.Completed.IsZero()
}

// UpdateRun is an update's course in the simulation.
type UpdateRun struct {
	From    string `json:"from"`
	To      string `json:"to"`
	Channel string `json:"channel"`
	// Conditional is an update the graph offers with risks; Risks are
	// those, with what the cluster's CVO had evaluated of them when the
	// snapshot was taken (the simulation does not evaluate them: it has
	// none of the cluster's metrics, and takes the update regardless).
	Conditional bool         `json:"conditional"`
	Risks       []UpdateRisk `json:"risks"`
	// Recommended is the cluster's evaluation of the conditional update
	// ("False: Reason: message").
	Recommended string `json:"recommended,omitempty"`
	// NotUpgradeable is the snapshot's Upgradeable=False message: it
	// holds an update to another minor version.
	NotUpgradeable string `json:"notUpgradeable,omitempty"`
	// Accepted is when the CVO took the release on; Completed when it
	// had applied it all (absent if it had not at the end); Took the time
	// between.
	Accepted  *Duration `json:"accepted,omitempty"`
	Completed *Duration `json:"completed,omitempty"`
	Took      *Duration `json:"took,omitempty"`
	// State is the ClusterVersion's history state of the release at the
	// end (Completed, Partial); Progress its Progressing and Failing
	// conditions.
	State    string `json:"state"`
	Progress string `json:"progress"`
	// RunLevels are the payload's run levels in the order the CVO
	// applied them, each with the operator waited on longest.
	RunLevels []RunLevelTime `json:"runLevels"`
	// LongestOperator is the ClusterOperator waited on longest, and for
	// how long.
	LongestOperator     string    `json:"longestOperator,omitempty"`
	LongestOperatorWait *Duration `json:"longestOperatorWait,omitempty"`
	// NotSimulated are the snapshot's ClusterOperators the simulated
	// release does not carry.
	NotSimulated []string `json:"notSimulated"`
}

// UpdateRisk is a risk of a conditional update.
type UpdateRisk struct {
	Name    string `json:"name"`
	Message string `json:"message"`
	URL     string `json:"url"`
	// Rules are its matching rules (Always, or a PromQL expression).
	Rules []string `json:"rules"`
}

// RunLevelTime is one run level of the update.
type RunLevelTime struct {
	RunLevel string   `json:"runLevel"`
	Started  Duration `json:"started"`
	Finished Duration `json:"finished"`
	// Operator is the ClusterOperator waited on longest in the level,
	// Waited how long.
	Operator string    `json:"operator,omitempty"`
	Waited   *Duration `json:"waited,omitempty"`
}

// updateRun fills the update's report from the plan, the CVO's timeline
// and the ClusterVersion at the end.
func (a *applier) updateRun(ctx context.Context) (*UpdateRun, error) {
	p := a.plan
	u := &UpdateRun{From: p.From, To: p.To, Channel: p.Channel, Conditional: p.Conditional, Risks: []UpdateRisk{},
		RunLevels: []RunLevelTime{}, NotSimulated: append([]string{}, p.Others...)}
	for _, r := range p.Risks {
		ur := UpdateRisk{Name: r.Name, Message: r.Message, URL: r.URL, Rules: []string{}}
		for _, m := range r.MatchingRules {
			rule := m.Type
			if m.PromQL != nil {
				rule += ": " + strings.TrimSpace(m.PromQL.PromQL)
			}
			ur.Rules = append(ur.Rules, rule)
		}
		u.Risks = append(u.Risks, ur)
	}
	if c := p.Recommended; c != nil {
		u.Recommended = fmt.Sprintf("%s: %s: %s", c.Status, c.Reason, c.Message)
	}
	if c := p.NotUpgradeable; c != nil && p.minor() {
		u.NotUpgradeable = fmt.Sprintf("%s: %s", c.Reason, c.Message)
	}
	cv, err := a.clusterVersion(ctx)
	if err != nil {
		return nil, err
	}
	u.State, u.Progress = "not accepted", describeProgress(cv)
	for _, h := range cv.Status.History {
		if h.Version == p.To {
			u.State = string(h.State)
			break
		}
	}
	pass := a.timeline.Pass(p.To)
	at := func(t time.Time) Duration { return Duration(a.rec.simAt(t)) }
	if !pass.Accepted.IsZero() {
		u.Accepted = ptr.To(at(pass.Accepted))
	}
	if !pass.Completed.IsZero() {
		u.Completed = ptr.To(at(pass.Completed))
		if u.Accepted != nil {
			u.Took = ptr.To(*u.Completed - *u.Accepted)
		}
	}
	var longest cvo.Span
	for _, l := range pass.RunLevels() {
		rl := RunLevelTime{RunLevel: l.RunLevel, Started: at(l.Start), Finished: at(l.End)}
		if l.Longest.Name != "" {
			rl.Operator, rl.Waited = l.Longest.Name, ptr.To(Duration(a.rec.simDuration(l.Longest.End.Sub(l.Longest.Start))))
			if l.Longest.End.Sub(l.Longest.Start) > longest.End.Sub(longest.Start) {
				longest = l.Longest
			}
		}
		u.RunLevels = append(u.RunLevels, rl)
	}
	if longest.Name != "" {
		u.LongestOperator = longest.Name
		u.LongestOperatorWait = ptr.To(Duration(a.rec.simDuration(longest.End.Sub(longest.Start))))
	}
	return u, nil
}
