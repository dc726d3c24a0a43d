package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	machinev1 "github.com/openshift/api/machine/v1beta1"
	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/mco"
	"github.com/capstan-dev/capstan/internal/nodes"
)

// mcoWorkers and mcoMaxUnavailable size the mco scenario's rollout.
const (
	mcoWorkers        = 5
	mcoMaxUnavailable = 2
)

// mcoScenario rolls a new MachineConfig over a worker pool of 5 nodes,
// two at a time, its user scaling a worker MachineSet up by one once the
// first node is updated.
func mcoScenario() *Scenario { return mcoRollout(false) }

// mcoPauseScenario is the mco scenario with the pool paused by its user
// in the middle of the rollout, and resumed.
func mcoPauseScenario() *Scenario {
	s := mcoRollout(true)
	s.Name = "mco-pause"
	s.Doc = fmt.Sprintf("the mco scenario with the pool paused by its user once a node is updated, and resumed %s later: no node "+
		"told to run the new configuration while the pool is paused, paused and maxUnavailable only ever as the user set them, "+
		"never more than 2 nodes out of service, each node rebooted exactly once, the pool Updated at the end", pauseFor)
	// Its operations took 14 to 23 s in the fresh-seed campaigns of
	// 2026-12-06/07.
	s.Span = 12 * time.Second
	return s
}

// pauseFor is how long the mco-pause scenario keeps the pool paused.
const pauseFor = 8 * time.Second

func mcoRollout(pause bool) *Scenario {
	const config = "50-chaos"
	return &Scenario{
		Name: "mco",
		Doc: "a MachineConfig rolled over a worker pool of 5 nodes with maxUnavailable 2, its user scaling a worker MachineSet up by one " +
			"once the first node is updated: never more than 2 nodes out of service, each node rebooted exactly once into the new rendered " +
			"configuration (the new one joins running it), maxUnavailable and the replicas only ever as the user set them, the pool Updated with 6 nodes at the end",
		Args: []string{"--control-plane-nodes", "1", "--nodes", fmt.Sprint(mcoWorkers), "--mcd-apply-duration", "1s", "--mcd-reboot-duration", "3s"},
		// Its operations took 14 to 19 s in the fresh-seed campaigns of
		// 2026-12-06/07.
		Span:    10 * time.Second,
		Points:  []Point{{failpoint.MCOTargetDecided, 1}, {failpoint.MCDMidApply, 2}, {failpoint.MCDMidReboot, 2}, {failpoint.MCDRebooted, 2}},
		Timeout: settleTime,
		// The phases: "" until the pool is installed, then maxUnavailable
		// is set (once: the user-intent invariant holds the MCO to it);
		// config, the MachineConfig created; rollout until the pool is
		// Updated.
		Progress: func(ctx context.Context, r *Run) (bool, string, error) {
			pools := r.MCO.MachineconfigurationV1().MachineConfigPools()
			p, err := readTypedPhase[mcoPhase](ctx, r)
			if err != nil {
				return false, "", err
			}
			pool, err := pools.Get(ctx, "worker", metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			switch p.Step {
			case mcoSetup:
				// The pool's first configuration is rendered and its nodes
				// run it before the new one comes.
				if ok, why, _ := poolUpdated(pool, mcoWorkers); !ok {
					return false, "the worker pool is not installed: " + why + "; " + releaseWaits(ctx, r), nil
				}
				patch := fmt.Sprintf(`{"spec":{"maxUnavailable":%d}}`, mcoMaxUnavailable)
				patched, err := pools.Patch(ctx, "worker", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
				if err != nil {
					return false, "", err
				}
				if err := r.intents.wrote(poolsKey+"worker", "maxUnavailable", fmt.Sprint(mcoMaxUnavailable), patched.ResourceVersion, poolMaxUnavailable); err != nil {
					return false, "", err
				}
				return false, "maxUnavailable set", writeTypedPhase(ctx, r, mcoPhase{Step: mcoConfig})
			case mcoConfig:
				mc := &mcfgv1.MachineConfig{ObjectMeta: metav1.ObjectMeta{Name: config, Labels: map[string]string{mco.RoleLabel: "worker"}},
					Spec: mcfgv1.MachineConfigSpec{Config: runtime.RawExtension{Raw: []byte(
						`{"ignition":{"version":"3.2.0"},"storage":{"files":[{"path":"/etc/chaos","contents":{"source":"data:,rolled"}}]}}`)}}}
				if _, err := r.MCO.MachineconfigurationV1().MachineConfigs().Create(ctx, mc, metav1.CreateOptions{}); created(err) != nil {
					return false, "", err
				}
				return false, config + " created", writeTypedPhase(ctx, r, mcoPhase{Step: mcoRolloutStep})
			}
			if !rendersFrom(pool, config) {
				return false, "the worker pool does not render " + config + " yet", nil
			}
			if pause && p.Step == mcoRolloutStep {
				return pauseMidRollout(ctx, r, pool)
			}
			if pause && p.Step == mcoPaused {
				return resumeAfterPause(ctx, r, p)
			}
			if pause {
				return poolUpdated(pool, mcoWorkers)
			}
			switch {
			case p.Step == mcoRolloutStep && pool.Status.UpdatedMachineCount >= 1:
				return false, "", decideScaleUp(ctx, r)
			case p.Step == mcoScale:
				return false, "worker MachineSet scaled", userScaleUp(ctx, r, p)
			case p.Step == mcoRolloutStep:
				return false, "waiting for a node updated to scale the workers at", nil
			}
			return poolUpdated(pool, mcoWorkers+1)
		},
		Check: func(ctx context.Context, r *Run) []Violation {
			pool, err := r.MCO.MachineconfigurationV1().MachineConfigPools().Get(ctx, "worker", metav1.GetOptions{})
			if err != nil {
				return []Violation{{"completes", err.Error()}}
			}
			if pause {
				out := checkRollout(r.History, "worker", isWorker, pool.Spec.Configuration.Name, mcoMaxUnavailable, mcoWorkers)
				out = append(out, checkPausedHeld(r, pool.Spec.Configuration.Name)...)
				return append(out, r.intents.check(r.History, poolsKey+"worker")...)
			}
			out := checkRollout(r.History, "worker", isWorker, pool.Spec.Configuration.Name, mcoMaxUnavailable, mcoWorkers+1)
			set, err := firstWorkerSet(ctx, r)
			if err != nil {
				return append(out, Violation{"user intent", err.Error()})
			}
			return append(out, r.intents.check(r.History, poolsKey+"worker", machineSetsKey+machine.Namespace+"/"+set.Name)...)
		},
	}
}

// mcoStep is where the mco scenarios are.
type mcoStep string

const (
	// The pool installed, its maxUnavailable set.
	mcoSetup  mcoStep = ""
	mcoConfig mcoStep = "config"
	// The MachineConfig created: the rollout runs.
	mcoRolloutStep mcoStep = "rollout"
	// mco: the worker MachineSet Set to be scaled to Replicas, then
	// scaled (userScale's own step).
	mcoScale  mcoStep = "scale"
	mcoScaled mcoStep = "scaled"
	// mco-pause: the pool paused At, then resumed.
	mcoPaused  mcoStep = "paused"
	mcoResumed mcoStep = "resumed"
)

// mcoPhase is the mco scenarios' phase, kept as JSON in the phase
// ConfigMap.
type mcoPhase struct {
	Step     mcoStep   `json:"step"`
	Set      string    `json:"set,omitempty"`
	Replicas int       `json:"replicas,omitempty"`
	At       time.Time `json:"at,omitzero"`
}

func (p mcoPhase) step() string { return string(p.Step) }

func isWorker(n *corev1.Node) bool {
	_, ok := n.Labels[nodes.LabelRoleWorker]
	return ok && !nodes.IsControlPlane(n)
}

// rendersFrom reports whether the pool's target configuration includes
// the MachineConfig name.
func rendersFrom(p *mcfgv1.MachineConfigPool, name string) bool {
	return slices.ContainsFunc(p.Spec.Configuration.Source, func(o corev1.ObjectReference) bool { return o.Name == name })
}

// decideScaleUp picks, once a node runs the new configuration, the worker
// MachineSet its user scales up by one mid-rollout, and the replicas to
// set: kept in the phase, so a write whose answer a kill loses is made
// again with the same number, never one more.
func decideScaleUp(ctx context.Context, r *Run) error {
	set, err := firstWorkerSet(ctx, r)
	if err != nil {
		return err
	}
	return writeTypedPhase(ctx, r, mcoPhase{Step: mcoScale, Set: set.Name, Replicas: int(ptr.Deref(set.Spec.Replicas, 0)) + 1})
}

// userScaleUp makes the scale-up decideScaleUp chose, as a user's `oc
// scale` would, and records it for the user-intent invariant.
func userScaleUp(ctx context.Context, r *Run, p mcoPhase) error {
	return userScaleThen(ctx, r, p.Set, p.Replicas, func() error { return writeTypedPhase(ctx, r, mcoPhase{Step: mcoScaled}) })
}

// firstWorkerSet is the installer's worker MachineSet that comes first by
// name: the one the mco scenario's user scales.
func firstWorkerSet(ctx context.Context, r *Run) (*machinev1.MachineSet, error) {
	sets, err := r.Machine.MachineV1beta1().MachineSets(machine.Namespace).List(ctx, metav1.ListOptions{LabelSelector: machine.ClusterIDLabel})
	if err != nil {
		return nil, err
	}
	var workers []machinev1.MachineSet
	for _, s := range sets.Items {
		if s.Spec.Template.Labels[machine.MachineRoleLabel] == "worker" {
			workers = append(workers, s)
		}
	}
	if len(workers) == 0 {
		return nil, fmt.Errorf("the cluster has no worker MachineSet of the installer's to scale")
	}
	slices.SortFunc(workers, func(a, b machinev1.MachineSet) int { return strings.Compare(a.Name, b.Name) })
	return &workers[0], nil
}

// poolUpdated reports whether the pool's n nodes all run its target.
func poolUpdated(p *mcfgv1.MachineConfigPool, n int) (bool, string, error) {
	st := p.Status
	updated := false
	for _, c := range st.Conditions {
		if c.Type == mcfgv1.MachineConfigPoolUpdated {
			updated = c.Status == corev1.ConditionTrue
		}
	}
	ok := updated && p.Spec.Configuration.Name != "" && st.Configuration.Name == p.Spec.Configuration.Name &&
		int(st.MachineCount) == n && int(st.UpdatedMachineCount) == n && int(st.ReadyMachineCount) == n
	return ok, fmt.Sprintf("pool %s: %d of %d machines updated to %s (%d ready), status at %s, Updated %v",
		p.Name, st.UpdatedMachineCount, st.MachineCount, p.Spec.Configuration.Name, st.ReadyMachineCount, st.Configuration.Name, updated), nil
}

// releaseWaits says what a pool's first rendering waits on: the MCO
// renders nothing before the CVO has applied the release's machine OS
// image ConfigMap, so a pool never installed is read beside where the
// CVO is.
func releaseWaits(ctx context.Context, r *Run) string {
	_, err := r.Kube.CoreV1().ConfigMaps(mco.Namespace).Get(ctx, mco.OSImageURLConfigMap, metav1.GetOptions{})
	cm := "present"
	if err != nil {
		cm = err.Error()
	}
	out := fmt.Sprintf("ConfigMap %s/%s: %s", mco.Namespace, mco.OSImageURLConfigMap, cm)
	cv, err := r.Config.ConfigV1().ClusterVersions().Get(ctx, cvo.Name, metav1.GetOptions{})
	if err != nil {
		return out + "; ClusterVersion: " + err.Error()
	}
	for _, c := range cv.Status.Conditions {
		if c.Type == configv1.OperatorProgressing || c.Type == configv1.ClusterStatusConditionType("Failing") {
			out += fmt.Sprintf("; ClusterVersion %s=%s: %s", c.Type, c.Status, c.Message)
		}
	}
	return out
}

// poolMaxUnavailable reads a stored pool's maxUnavailable ("unset"
// without one).
func poolMaxUnavailable(obj runtime.Object) string {
	p, ok := obj.(*mcfgv1.MachineConfigPool)
	if !ok || p.Spec.MaxUnavailable == nil {
		return "unset"
	}
	return p.Spec.MaxUnavailable.String()
}

// pauseMidRollout pauses the pool, as its user would, once a node runs
// the new configuration and others do not yet.
func pauseMidRollout(ctx context.Context, r *Run, pool *mcfgv1.MachineConfigPool) (bool, string, error) {
	ok, why, _ := poolUpdated(pool, mcoWorkers)
	if ok {
		// Too late to pause mid-rollout: the check says so.
		return false, "the rollout completed before the pause", writeTypedPhase(ctx, r, mcoPhase{Step: mcoResumed})
	}
	if pool.Status.UpdatedMachineCount < 1 {
		return false, "waiting for a node updated to pause at: " + why, nil
	}
	if err := setPaused(ctx, r, true); err != nil {
		return false, "", err
	}
	return false, "paused", writeTypedPhase(ctx, r, mcoPhase{Step: mcoPaused, At: time.Now()})
}

// resumeAfterPause resumes the pool pauseFor after it was paused.
func resumeAfterPause(ctx context.Context, r *Run, p mcoPhase) (bool, string, error) {
	if left := pauseFor - time.Since(p.At); left > 0 {
		return false, fmt.Sprintf("paused, %.0fs left", left.Seconds()), nil
	}
	if err := setPaused(ctx, r, false); err != nil {
		return false, "", err
	}
	return false, "resumed", writeTypedPhase(ctx, r, mcoPhase{Step: mcoResumed})
}

// setPaused sets the worker pool's paused, and records the intent.
func setPaused(ctx context.Context, r *Run, paused bool) error {
	patch := fmt.Sprintf(`{"spec":{"paused":%v}}`, paused)
	p, err := r.MCO.MachineconfigurationV1().MachineConfigPools().Patch(ctx, "worker", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return err
	}
	return r.intents.wrote(poolsKey+"worker", "paused", fmt.Sprint(paused), p.ResourceVersion, poolPaused)
}

// poolPaused reads a stored pool's paused.
func poolPaused(obj runtime.Object) string {
	p, ok := obj.(*mcfgv1.MachineConfigPool)
	if !ok {
		return "not a pool"
	}
	return fmt.Sprint(p.Spec.Paused)
}

// checkPausedHeld checks that no worker was told to run config while the
// pool was paused: from the revision at which the MCO reported that it saw
// the user's pause to the user's resume, read from the revisions of those
// writes. Between the pause and that report the MCO may still act on the
// pool as it last read it, as the MCO's node controller does: it decides
// from its informer's copy, and no write can be made conditional on
// another object. Once its status has observed the pause's generation, a
// target is a controller that ignored the pause.
func checkPausedHeld(r *Run, config string) []Violation {
	from, to := r.intents.span(poolsKey+"worker", "paused", "true", "false")
	if from == 0 || to == 0 {
		return []Violation{{"paused", fmt.Sprintf("the campaign did not record both its pause and its resume of the pool (revisions %d, %d)", from, to)}}
	}
	seen := pauseObserved(r.History, poolsKey+"worker", from, to)
	if seen == 0 {
		// The MCO did not report the pause before the resume (it was
		// down through it): nothing it did can be held to it.
		return nil
	}
	var out []Violation
	nodeStates(r.History, func(rev int64, n, prev *corev1.Node, _ map[string]*corev1.Node) {
		if rev <= seen || rev >= to || n == nil || !isWorker(n) {
			return
		}
		if n.Annotations[mco.DesiredConfigAnnotation] == config && (prev == nil || prev.Annotations[mco.DesiredConfigAnnotation] != config) {
			out = append(out, Violation{"paused", fmt.Sprintf("node %s was told to run %s at revision %d, while the pool was paused (revisions %d to %d; the MCO saw the pause at %d)",
				n.Name, config, rev, from, to, seen)})
		}
	})
	return out
}

// pauseObserved is the first revision in (from, to) at which the pool's
// status observed the generation of the pool written at from (the pause),
// or 0.
func pauseObserved(h *History, key string, from, to int64) int64 {
	var gen int64
	for _, e := range h.Events(key) {
		if e.Key != key || e.Obj == nil {
			continue
		}
		p, ok := e.Obj.(*mcfgv1.MachineConfigPool)
		if !ok {
			continue
		}
		switch {
		case e.Rev == from:
			gen = p.Generation
		case e.Rev > from && e.Rev < to && gen > 0 && p.Status.ObservedGeneration >= gen:
			return e.Rev
		}
	}
	return 0
}
