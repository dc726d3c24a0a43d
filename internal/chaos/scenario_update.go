package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/mco"
	"github.com/capstan-dev/capstan/internal/nodes"
	"github.com/capstan-dev/capstan/internal/operators"
	"github.com/capstan-dev/capstan/internal/updateservice/demo"
)

// The update the update scenario makes.
const (
	updateFrom = "4.10.22"
	updateTo   = "4.10.26"
)

// updateScenario updates the cluster from 4.10.22 to 4.10.26, run level
// by run level, with the new machine OS rolled over both pools.
func updateScenario() *Scenario {
	return &Scenario{
		Name: "update",
		Doc: "`capstan adm upgrade --to 4.10.26` from 4.10.22 with the node rollout of both pools, its user switching the channel to " +
			updateChannel + " while the CVO applies it: the channel stays as the user set it and the CVO reads its graph, the update completes with one " +
			"Completed history entry and none Partial, the release retrieved once, no operator updated ahead of a lower run level, " +
			"each node rebooted once into its new configuration, never more than one node of a pool out of service",
		Args: []string{"--control-plane-nodes", "1", "--nodes", "2", "--mcd-apply-duration", "1s", "--mcd-reboot-duration", "2s"},
		// Its operations took 36 to 43 s in the fresh-seed campaigns of
		// 2026-12-06/07.
		Span: 30 * time.Second,
		// The only master reboots into the new machine OS: the API is
		// down for its reboot and etcd's start after it.
		MaxOutage: time.Minute,
		Points: []Point{{failpoint.CVORetrieved, 1}, {failpoint.CVOHandover, 1}, {failpoint.CVOMidApply, 10}, {failpoint.CVOApplied, 1},
			{failpoint.MCOTargetDecided, 1}, {failpoint.MCDMidApply, 1}, {failpoint.MCDMidReboot, 1}, {failpoint.MCDRebooted, 1}},
		Timeout: settleTime,
		Progress: func(ctx context.Context, r *Run) (bool, string, error) {
			cv, err := r.Config.ConfigV1().ClusterVersions().Get(ctx, cvo.Name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			if cv.Spec.DesiredUpdate == nil {
				// Each operator takes a moment to roll out its new
				// version, as real ones do (minutes there).
				for _, op := range demo.Operators {
					patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"2s"}}}`, operators.DelayAnnotation)
					if _, err := r.Kube.CoreV1().Namespaces().Patch(ctx, op.Namespace, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
						return false, "", err
					}
				}
				if !completed(cv, updateFrom) || !slices.ContainsFunc(cv.Status.AvailableUpdates, func(u configv1.Release) bool { return u.Version == updateTo }) {
					return false, "not installed with " + updateTo + " available: " + describe(cv), nil
				}
				if out, err := r.Capstan(ctx, "adm", "upgrade", "--to", updateTo); err != nil {
					return false, "", fmt.Errorf("capstan adm upgrade --to %s: %v: %s", updateTo, err, out)
				}
				r.op.enter("update")
				return false, "update requested", nil
			}
			if !completed(cv, updateTo) {
				r.op.enter("update")
				if err := userChangesChannel(ctx, r, cv); err != nil {
					return false, "", err
				}
				return false, "updating: " + describe(cv), nil
			}
			r.op.enter("pools")
			for pool, n := range map[string]int{"master": 1, "worker": 2} {
				p, err := r.MCO.MachineconfigurationV1().MachineConfigPools().Get(ctx, pool, metav1.GetOptions{})
				if err != nil {
					return false, "", err
				}
				mc, err := r.MCO.MachineconfigurationV1().MachineConfigs().Get(ctx, p.Spec.Configuration.Name, metav1.GetOptions{})
				if err != nil {
					return false, "", err
				}
				if v := mc.Annotations[mco.ReleaseImageVersionAnnotation]; v != updateTo {
					return false, fmt.Sprintf("pool %s targets %s, of release %s", pool, mc.Name, v), nil
				}
				if ok, why, _ := poolUpdated(p, n); !ok {
					return false, why, nil
				}
			}
			return true, "", nil
		},
		Check: checkUpdate,
	}
}

// updateChannel is the channel the update scenario's user switches to
// while the update runs (from capstan's fast-4.11): it has 4.10.26 but
// not 4.11.0.
const updateChannel = "stable-4.10"

// userChangesChannel switches the cluster's channel, as
// `oc adm upgrade channel stable-4.10` would, once the CVO has begun the
// update: a user's edit made concurrently with the update, recorded for
// the user-intent invariant. It writes once; a write whose answer is
// lost is made again (the same value).
func userChangesChannel(ctx context.Context, r *Run, cv *configv1.ClusterVersion) error {
	key := clusterVersions + cvo.Name
	if r.intents.has(key, "channel") || len(cv.Status.History) == 0 || cv.Status.History[0].Version != updateTo {
		return nil
	}
	patch := fmt.Sprintf(`{"spec":{"channel":%q}}`, updateChannel)
	patched, err := r.Config.ConfigV1().ClusterVersions().Patch(ctx, cvo.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return err
	}
	return r.intents.wrote(key, "channel", updateChannel, patched.ResourceVersion, cvChannel)
}

// cvChannel reads a stored ClusterVersion's channel.
func cvChannel(obj runtime.Object) string {
	cv, ok := obj.(*configv1.ClusterVersion)
	if !ok {
		return "not a ClusterVersion"
	}
	return cv.Spec.Channel
}

// completed reports whether the cluster's latest update, to version, is
// Completed.
func completed(cv *configv1.ClusterVersion, version string) bool {
	h := cv.Status.History
	return len(h) > 0 && h[0].Version == version && h[0].State == configv1.CompletedUpdate
}

func describe(cv *configv1.ClusterVersion) string {
	var parts []string
	for _, h := range cv.Status.History {
		parts = append(parts, h.Version+" "+string(h.State))
	}
	var conds []string
	for _, c := range cv.Status.Conditions {
		if c.Type == configv1.OperatorProgressing || c.Type == cvo.Failing {
			conds = append(conds, fmt.Sprintf("%s=%s %s", c.Type, c.Status, c.Message))
		}
	}
	return fmt.Sprintf("history [%s]; %s", strings.Join(parts, ", "), strings.Join(conds, "; "))
}

func checkUpdate(ctx context.Context, r *Run) []Violation {
	var out []Violation
	add := func(inv, format string, a ...any) { out = append(out, Violation{inv, fmt.Sprintf(format, a...)}) }
	cv, err := r.Config.ConfigV1().ClusterVersions().Get(ctx, cvo.Name, metav1.GetOptions{})
	if err != nil {
		return []Violation{{"history", err.Error()}}
	}
	// One Completed entry per release, none Partial.
	h := cv.Status.History
	if len(h) != 2 || h[0].Version != updateTo || h[0].State != configv1.CompletedUpdate || !h[0].Verified ||
		h[1].Version != updateFrom || h[1].State != configv1.CompletedUpdate {
		add("history", "the history is %s, want %s Completed (verified) then %s Completed", describe(cv), updateTo, updateFrom)
	}
	for _, c := range []struct {
		t    configv1.ClusterStatusConditionType
		want configv1.ConditionStatus
	}{{configv1.OperatorAvailable, configv1.ConditionTrue}, {configv1.OperatorProgressing, configv1.ConditionFalse},
		{cvo.Failing, configv1.ConditionFalse}, {cvo.ReleaseAccepted, configv1.ConditionTrue}} {
		if got := cvo.FindCondition(cv.Status.Conditions, c.t); got == nil || got.Status != c.want {
			add("conditions", "%s is %v at the end, want %s", c.t, got, c.want)
		}
	}
	// The user's channel change, made during the update, holds, and the
	// CVO read the new channel's graph: 4.11.0 is only in the old one.
	out = append(out, r.intents.check(r.History, clusterVersions+cvo.Name)...)
	if cv.Spec.Channel == updateChannel {
		for _, u := range cv.Status.AvailableUpdates {
			add("channel", "%s is an available update in channel %s, which does not have it", u.Version, updateChannel)
		}
		for _, u := range cv.Status.ConditionalUpdates {
			add("channel", "%s is a conditional update in channel %s, which does not have it", u.Release.Version, updateChannel)
		}
	}
	// At no revision two entries for the update.
	for _, e := range r.History.Events(clusterVersions) {
		cv, ok := e.Obj.(*configv1.ClusterVersion)
		if !ok {
			continue
		}
		n := 0
		for _, h := range cv.Status.History {
			if h.Version == updateTo {
				n++
			}
		}
		if n > 1 {
			add("history", "revision %d has %d history entries for %s: %s", e.Rev, n, updateTo, describe(cv))
			break
		}
	}
	out = append(out, checkRunLevels(r.History)...)
	// The release was retrieved once.
	var jobs []string
	for _, e := range r.History.Events(jobsKey) {
		if j, ok := e.Obj.(*batchv1.Job); ok && e.Prev == nil && strings.HasPrefix(j.Name, "version-"+updateTo+"-") {
			jobs = append(jobs, j.Name)
		}
	}
	if len(jobs) != 1 {
		add("retrievals", "the release was retrieved by %d Jobs (%s), want 1", len(jobs), summarize(jobs, 5))
	}
	// Each pool rolled one node at a time, each node rebooted once.
	for _, pool := range []struct {
		name   string
		member func(*corev1.Node) bool
		nodes  int
	}{{"master", nodes.IsControlPlane, 1}, {"worker", isWorker, 2}} {
		p, err := r.MCO.MachineconfigurationV1().MachineConfigPools().Get(ctx, pool.name, metav1.GetOptions{})
		if err != nil {
			add("completes", "pool %s: %v", pool.name, err)
			continue
		}
		out = append(out, checkRollout(r.History, pool.name, pool.member, p.Spec.Configuration.Name, 1, pool.nodes)...)
		if pool.name == "master" {
			out = append(out, checkMachineConfigWaitsForMasters(r.History, p.Spec.Configuration.Name)...)
		}
	}
	return out
}

// checkMachineConfigWaitsForMasters checks that the machine-config
// operator reported the new version only once the control plane ran it,
// as the MCO waits for its required pool (master) before it bumps its
// version: at the revision of its report, every control-plane node was
// told to run config, runs it, is Done and schedulable (not in its drain
// or reboot). A report never made is checkRunLevels' to say.
func checkMachineConfigWaitsForMasters(h *History, config string) []Violation {
	rev := reportRevisions(h)["machine-config"]
	if rev == 0 {
		return nil
	}
	var unfinished []string
	seen := false
	nodeStates(h, func(r int64, _, _ *corev1.Node, all map[string]*corev1.Node) {
		if r > rev {
			return
		}
		seen, unfinished = true, nil
		for _, n := range all {
			a := n.Annotations
			if nodes.IsControlPlane(n) && (a[mco.CurrentConfigAnnotation] != config || a[mco.DesiredConfigAnnotation] != config ||
				a[mco.StateAnnotation] != mco.StateDone || n.Spec.Unschedulable) {
				unfinished = append(unfinished, fmt.Sprintf("%s (current %q, desired %q, %s, unschedulable %v)", n.Name,
					a[mco.CurrentConfigAnnotation], a[mco.DesiredConfigAnnotation], a[mco.StateAnnotation], n.Spec.Unschedulable))
			}
		}
	})
	switch {
	case !seen:
		return []Violation{{"run levels", fmt.Sprintf("machine-config reported %s at revision %d, before the history holds any node", updateTo, rev)}}
	case len(unfinished) > 0:
		sort.Strings(unfinished)
		return []Violation{{"run levels", fmt.Sprintf("machine-config reported %s at revision %d while control-plane nodes had not finished %s: %s",
			updateTo, rev, config, strings.Join(unfinished, "; "))}}
	}
	return nil
}

// reportRevisions is, for each operator of the release, the revision at
// which it first reported the new version.
func reportRevisions(h *History) map[string]int64 {
	inRelease := map[string]bool{}
	for _, op := range demo.Operators {
		inRelease[op.Name] = true
	}
	reported := map[string]int64{}
	for _, e := range h.Events(operatorsKey) {
		co, ok := e.Obj.(*configv1.ClusterOperator)
		if !ok || !inRelease[co.Name] || reported[co.Name] != 0 {
			continue
		}
		if slices.ContainsFunc(co.Status.Versions, func(v configv1.OperandVersion) bool { return v.Name == "operator" && v.Version == updateTo }) {
			reported[co.Name] = e.Rev
		}
	}
	return reported
}

// checkRunLevels checks, over every revision of the cluster operators,
// that none reported the new version before each operator of a lower run
// level had.
func checkRunLevels(h *History) []Violation {
	level := map[string]int{}
	for _, op := range demo.Operators {
		level[op.Name], _ = strconv.Atoi(op.RunLevel)
	}
	reported := reportRevisions(h)
	order := slices.Collect(maps.Keys(reported))
	sort.Slice(order, func(i, j int) bool { return reported[order[i]] < reported[order[j]] })
	var out []Violation
	for _, name := range order {
		for other, l := range level {
			if l < level[name] && (reported[other] == 0 || reported[other] > reported[name]) {
				out = append(out, Violation{"run levels", fmt.Sprintf("%s (run level %d) reported %s at revision %d, before %s (run level %d)",
					name, level[name], updateTo, reported[name], other, l)})
			}
		}
	}
	if len(reported) != len(level) {
		var missing []string
		for name := range level {
			if reported[name] == 0 {
				missing = append(missing, name)
			}
		}
		sort.Strings(missing)
		out = append(out, Violation{"completes", "operators that never reported " + updateTo + ": " + strings.Join(missing, ", ")})
	}
	return out
}
