package cvo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/capstan-dev/capstan/internal/cvo/payload"
	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/planted"
	"github.com/capstan-dev/capstan/internal/release"
	"github.com/capstan-dev/capstan/internal/seeded"
)

// The CVO's own namespace and workload.
const (
	Namespace      = "openshift-cluster-version"
	DeploymentName = "cluster-version-operator"
	// VersionEnv is the release version a Deployment of the payload runs.
	VersionEnv = "RELEASE_VERSION"
	// ReleaseAccepted is the ClusterVersion condition of the payload's
	// retrieval, verification and preconditions.
	ReleaseAccepted configv1.ClusterStatusConditionType = "ReleaseAccepted"
	// Failing is the ClusterVersion condition of errors holding the sync.
	Failing configv1.ClusterStatusConditionType = "Failing"
	// Invalid says spec cannot be acted on.
	Invalid configv1.ClusterStatusConditionType = "Invalid"
)

// errHandover ends a pass when the CVO's own Deployment of the new
// release has been applied: the loop starts again as the new version.
var errHandover = errors.New("handing over to the new cluster-version-operator")

// target is what the CVO works towards.
type target struct {
	Version, Image string
	Force          bool
}

func (t target) String() string { return versionOrImage(t.Version, t.Image) }

// resolve turns spec.desiredUpdate into a release: an image is taken as
// given; a version alone must be one of the available (recommended)
// updates. Without desiredUpdate, the target is the current release.
func resolve(cv *configv1.ClusterVersion) (target, error) {
	cur := target{Version: cv.Status.Desired.Version, Image: cv.Status.Desired.Image}
	u := cv.Spec.DesiredUpdate
	if u == nil || (u.Image == "" && u.Version == "") {
		return cur, nil
	}
	if u.Architecture != "" && u.Architecture != configv1.ClusterVersionArchitecture("") {
		return cur, fmt.Errorf("spec.desiredUpdate.architecture: Unsupported value: %q: capstan's releases are single-architecture", u.Architecture)
	}
	if u.Image != "" {
		return target{Version: u.Version, Image: u.Image, Force: u.Force}, nil
	}
	if cv.Status.Desired.Version == u.Version {
		return cur, nil
	}
	var images []string
	for _, r := range cv.Status.AvailableUpdates {
		if r.Version == u.Version {
			images = append(images, r.Image)
		}
	}
	// A conditional update is not taken by version alone, as upstream's
	// findUpdateFromConfigVersion does not: a client that accepts its
	// risks names its image too (oc adm upgrade --allow-not-recommended,
	// the console), so a bare version patch cannot pick one unseen.
	switch len(dedupe(images)) {
	case 0:
		return cur, fmt.Errorf("spec.desiredUpdate.version: Invalid value: %q: when image is empty the update must be an available update", u.Version)
	case 1:
		return target{Version: u.Version, Image: images[0], Force: u.Force}, nil
	}
	return cur, fmt.Errorf("spec.desiredUpdate.version: Invalid value: %q: there are multiple possible payloads for this version, specify the exact image", u.Version)
}

func dedupe(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// modeOf is what applying t is: Initializing before any release was
// completed, Reconciling once t itself was, Updating otherwise.
func modeOf(cv *configv1.ClusterVersion, t target) payload.Mode {
	completed := false
	for _, h := range cv.Status.History {
		completed = completed || h.State == configv1.CompletedUpdate
	}
	switch {
	case !completed:
		return payload.Initializing
	case len(cv.Status.History) > 0 && cv.Status.History[0].Image == t.Image && cv.Status.History[0].State == configv1.CompletedUpdate:
		return payload.Reconciling
	}
	return payload.Updating
}

// worker applies one target until it is replaced: it loads and accepts
// the release, applies it, and then keeps reconciling it.
type worker struct {
	o      *Operator
	target target
	cancel context.CancelFunc
	done   chan struct{}
	prog   *progress
	// emitted are the events this worker recorded (see event).
	emitted map[string]bool
}

// syncWork starts a worker for the ClusterVersion's target when it
// changed, stopping the one before.
func (o *Operator) syncWork(ctx context.Context, cv *configv1.ClusterVersion) error {
	t, invalid := resolve(cv)
	if err := o.setInvalid(ctx, invalid); err != nil {
		return err
	}
	if t.Image == "" {
		return nil
	}
	if o.work != nil && o.work.target == t {
		return nil
	}
	if o.work != nil {
		klog.FromContext(ctx).Info("The update target changed", "from", o.work.target, "to", t)
		o.work.cancel()
		<-o.work.done
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &worker{o: o, target: t, cancel: cancel, done: make(chan struct{}), prog: newProgress(o.opts.Clock.Now)}
	o.work = w
	go w.run(wctx)
	return nil
}

// setInvalid sets or clears the Invalid condition.
func (o *Operator) setInvalid(ctx context.Context, invalid error) error {
	return o.updateStatus(ctx, func(cv *configv1.ClusterVersion, now metav1.Time) {
		if invalid == nil {
			removeCondition(&cv.Status.Conditions, Invalid)
			return
		}
		SetCondition(&cv.Status.Conditions, configv1.ClusterOperatorStatusCondition{Type: Invalid, Status: configv1.ConditionTrue,
			Reason: "InvalidClusterVersion", Message: "The cluster version is invalid: " + invalid.Error()}, now)
	})
}

func removeCondition(conds *[]configv1.ClusterOperatorStatusCondition, t configv1.ClusterStatusConditionType) {
	kept := (*conds)[:0]
	for _, c := range *conds {
		if c.Type != t {
			kept = append(kept, c)
		}
	}
	*conds = kept
}

// updateStatus changes the ClusterVersion's status with mutate, on the
// latest copy, writing only when something changed.
func (o *Operator) updateStatus(ctx context.Context, mutate func(cv *configv1.ClusterVersion, now metav1.Time)) error {
	o.statusMu.Lock()
	defer o.statusMu.Unlock()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cv, err := o.client.ConfigV1().ClusterVersions().Get(ctx, Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		before := cv.Status.DeepCopy()
		mutate(cv, metav1.NewTime(o.opts.Clock.Now()))
		if equality.Semantic.DeepEqual(before, &cv.Status) {
			return nil
		}
		_, err = o.client.ConfigV1().ClusterVersions().UpdateStatus(ctx, cv, metav1.UpdateOptions{})
		return err
	})
}

func (w *worker) run(ctx context.Context) {
	defer close(w.done)
	log := klog.FromContext(ctx).WithValues("target", w.target.String())
	stopReport := w.reportLoop(ctx)
	defer stopReport()
	failures := 0
	for {
		err := w.syncOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		var next time.Duration
		switch {
		case errors.Is(err, errHandover):
			log.Info("Applied the new cluster-version-operator: starting again as it")
			continue
		case err != nil:
			failures++
			next = min(w.o.opts.RetryInterval<<min(failures-1, 4), w.o.opts.MaxRetryInterval)
			log.Info("Syncing the release failed; trying again", "in", next, "err", err)
		default:
			failures = 0
			next = w.o.opts.ReconcileInterval
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}

// syncOnce loads the target (retrieving, verifying and accepting it when
// it is new) and applies it once in the mode the cluster is in.
func (w *worker) syncOnce(ctx context.Context) error {
	o := w.o
	cv, err := o.client.ConfigV1().ClusterVersions().Get(ctx, Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	t := w.target
	accepted := cv.Status.Desired.Image == t.Image && conditionTrue(cv.Status.Conditions, ReleaseAccepted)
	var img *release.Image
	if accepted {
		img, err = o.loadAccepted(ctx, cv, t)
		if err == nil && planted.On(planted.UpdateTwice) {
			err = o.updateStatus(ctx, func(cv *configv1.ClusterVersion, _ metav1.Time) {
				if h := cv.Status.History; len(h) > 0 && h[0].Image == t.Image && h[0].State == configv1.PartialUpdate && (len(h) < 2 || h[1].Image != t.Image) {
					cv.Status.History = append([]configv1.UpdateHistory{h[0]}, h...)
				}
			})
		}
	} else {
		img, err = w.accept(ctx, cv)
	}
	if err != nil {
		return err
	}
	if cv, err = o.client.ConfigV1().ClusterVersions().Get(ctx, Name, metav1.GetOptions{}); err != nil {
		return err
	}
	version := img.Payload.Metadata.Version
	mode := modeOf(cv, t)
	all, err := payload.Load(img.Payload)
	if err != nil {
		return w.prog.fail(&payload.UpdateError{Effect: payload.EffectFail, Reason: "UpdatePayloadIntegrity", Message: "The content of the update is invalid: " + err.Error(), Nested: err})
	}
	// The capabilities enabled, as the status says them, pick the
	// manifests with the cluster's profile and feature set.
	caps := CapabilitiesOf(cv)
	if err := o.updateStatus(ctx, func(cv *configv1.ClusterVersion, now metav1.Time) {
		cv.Status.Capabilities = caps.Status()
		SetCondition(&cv.Status.Conditions, caps.Condition(), now)
	}); err != nil {
		return err
	}
	filter := o.opts.Filter
	filter.Capabilities = caps.Set()
	var manifests []*payload.Manifest
	for _, m := range all {
		if filter.Include(m) == nil {
			manifests = append(manifests, m)
		}
	}
	overrides := cv.Spec.Overrides
	var g *payload.Graph
	workers := 16
	switch mode {
	case payload.Initializing:
		g = payload.Flatten(manifests)
		workers = g.Nodes()
	case payload.Reconciling:
		g = payload.Flatten(manifests)
		for _, l := range g.Levels {
			seeded.Shuffle(len(l), func(i, j int) { l[i], l[j] = l[j], l[i] })
		}
		workers = 2
	default:
		g = payload.ByRunLevel(manifests)
	}
	w.prog.start(version, mode, g.Tasks())
	if mode != payload.Reconciling {
		w.o.opts.Timeline.started(version, g.Tasks())
	}
	w.prog.changed()
	err = payload.Run(ctx, g, workers, func(ctx context.Context, m *payload.Manifest) error {
		if Unmanaged(overrides, m) {
			// The admin took the object out of the CVO's hands: it is
			// neither applied nor waited for.
			w.prog.taskDone()
			return nil
		}
		return w.apply(ctx, m, mode, version)
	})
	if err != nil {
		if errors.Is(err, errHandover) {
			return errHandover
		}
		return w.prog.fail(runFailure(err))
	}
	if mode == payload.Reconciling {
		// Operators are checked, not waited for, while reconciling.
		if e := w.prog.waitErr(); e != nil {
			w.report(ctx)
			return nil
		}
	}
	failpoint.Hit(failpoint.CVOApplied)
	if mode != payload.Reconciling {
		w.o.opts.Timeline.completed(version, time.Now())
	}
	w.prog.complete()
	if err := o.updateStatus(ctx, func(cv *configv1.ClusterVersion, now metav1.Time) {
		desired := cv.Status.Desired
		cv.Status.History = MergeHistory(cv.Status.History, desired, true, false, "", now)
		w.setProgress(cv, now)
	}); err != nil {
		return err
	}
	if mode != payload.Reconciling {
		w.event(corev1.EventTypeNormal, "UpgradeComplete", fmt.Sprintf("Cluster version %s is completed", version))
	}
	return o.reportOperator(ctx)
}

// runFailure is what a pass that failed reports: each component's
// failure, folded as the CVO folds them (several make MultipleErrors).
func runFailure(err error) *payload.UpdateError {
	errs := []error{err}
	if inc := (*payload.IncompleteError)(nil); errors.As(err, &inc) {
		errs = inc.Errs
	}
	var out []*payload.UpdateError
	for _, e := range errs {
		if ue := (*payload.UpdateError)(nil); errors.As(e, &ue) {
			out = append(out, ue)
			continue
		}
		out = append(out, &payload.UpdateError{Effect: payload.EffectFail, Reason: "UpdatePayloadFailed", Message: e.Error(), Nested: e})
	}
	return payload.Summarize(out)
}

// ClusterVersionRef is what the CVO's events are about: the ClusterVersion,
// its events kept in the CVO's namespace, as OpenShift's.
var ClusterVersionRef = &corev1.ObjectReference{APIVersion: "config.openshift.io/v1", Kind: "ClusterVersion", Name: Name, Namespace: Namespace}

func conditionTrue(conds []configv1.ClusterOperatorStatusCondition, t configv1.ClusterStatusConditionType) bool {
	c := FindCondition(conds, t)
	return c != nil && c.Status == configv1.ConditionTrue
}

// apply applies one manifest; a ClusterOperator's manifest is the wait for
// that operator to reach the versions it lists.
func (w *worker) apply(ctx context.Context, m *payload.Manifest, mode payload.Mode, version string) error {
	start := time.Now()
	if m.Kind == "ClusterOperator" && strings.HasPrefix(m.APIVersion, "config.openshift.io/") {
		err := w.waitOperator(ctx, m, mode)
		if err == nil && mode != payload.Reconciling {
			w.o.opts.Timeline.task(version, TaskWait, m, start, time.Now())
		}
		return err
	}
	var err error
	for attempt := range w.o.opts.ApplyAttempts {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(w.o.opts.RetryInterval):
			}
		}
		if err = w.o.applier.Apply(ctx, m); err == nil || ctx.Err() != nil {
			failpoint.Hit(failpoint.CVOMidApply)
			break
		}
	}
	if err != nil {
		done, total := w.prog.counts()
		return applyError(m, err, done, total)
	}
	if mode != payload.Reconciling {
		w.o.opts.Timeline.task(version, TaskApply, m, start, time.Now())
	}
	w.prog.taskDone()
	if mode == payload.Updating && m.Dir == release.ManifestsDir && m.Kind == "Deployment" && m.Namespace == Namespace && m.Name == DeploymentName &&
		w.o.Running() != version {
		w.o.setRunning(version)
		if err := w.o.reportOperator(ctx); err != nil {
			return err
		}
		failpoint.Hit(failpoint.CVOHandover)
		return errHandover
	}
	return nil
}

// applyError words an apply failure as the CVO does.
func applyError(m *payload.Manifest, err error, done, total int) *payload.UpdateError {
	reason := "UpdatePayloadFailed"
	switch {
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		reason = "UpdatePayloadResourceInvalid"
	case apierrors.IsNotFound(err):
		reason = "UpdatePayloadResourceNotFound"
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		reason = "UpdatePayloadResourceConflict"
	case apierrors.IsForbidden(err):
		reason = "UpdatePayloadResourceForbidden"
	case apierrors.IsUnauthorized(err):
		reason = "UpdatePayloadClusterUnauthorized"
	case apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err):
		reason = "UpdatePayloadClusterOverloaded"
	case apierrors.IsInternalError(err):
		reason = "UpdatePayloadClusterError"
	case meta.IsNoMatchError(err) || strings.Contains(err.Error(), "the cluster does not serve"):
		reason = "UpdatePayloadResourceTypeMissing"
	}
	name := m.Name
	if m.Namespace != "" {
		name = m.Namespace + "/" + m.Name
	}
	return &payload.UpdateError{Effect: payload.EffectFail, Reason: reason, Name: name, Nested: err,
		Message: fmt.Sprintf("Could not update %s %q (%d of %d): %v", strings.ToLower(m.Kind), name, done+1, total, err)}
}

// OperatorStub is what the CVO applies of a ClusterOperator manifest of
// the payload (expected, decoded): its metadata and an empty spec (the CRD
// requires one), never its status, which is its operator's to report.
func OperatorStub(m *payload.Manifest, expected *configv1.ClusterOperator) (*payload.Manifest, error) {
	stub := &payload.Manifest{Dir: m.Dir, File: m.File, Index: m.Index, APIVersion: m.APIVersion, Kind: m.Kind, Name: m.Name, Annotations: m.Annotations}
	raw, err := json.Marshal(map[string]any{"apiVersion": m.APIVersion, "kind": m.Kind,
		"metadata": map[string]any{"name": expected.Name, "annotations": expected.Annotations, "labels": expected.Labels},
		"spec":     map[string]any{}})
	if err != nil {
		return nil, err
	}
	stub.Raw = raw
	return stub, nil
}

// waitOperator creates a ClusterOperator of the payload if it is missing
// (so it shows early), then waits until the operator is done: available,
// not degraded, at the manifest's versions. While reconciling it looks
// once and reports.
func (w *worker) waitOperator(ctx context.Context, m *payload.Manifest, mode payload.Mode) error {
	expected := &configv1.ClusterOperator{}
	if err := yaml.Unmarshal(m.Raw, expected); err != nil {
		return &payload.UpdateError{Effect: payload.EffectFail, Reason: "UpdatePayloadIntegrity", Message: fmt.Sprintf("%s: %v", m, err), Nested: err}
	}
	// The ClusterOperator is created early, so it shows before its
	// operator runs.
	meta, err := OperatorStub(m, expected)
	if err != nil {
		return err
	}
	if err := w.o.applier.Apply(ctx, meta); err != nil {
		done, total := w.prog.counts()
		return applyError(m, err, done, total)
	}
	cos := w.o.client.ConfigV1().ClusterOperators()
	level, _, _ := release.RunLevel(m.File)
	for {
		actual, err := cos.Get(ctx, expected.Name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			actual = nil
		}
		uerr := payload.OperatorHealth(expected, actual, mode)
		if uerr == nil || (mode == payload.Initializing && uerr.Effect == payload.EffectReport) {
			w.prog.operatorDone(expected.Name)
			return nil
		}
		if w.prog.waiting(expected.Name, level, uerr) && mode != payload.Reconciling {
			// On the operator, so each one's wait keeps its own event.
			w.o.recorder.Eventf(&corev1.ObjectReference{APIVersion: "config.openshift.io/v1", Kind: "ClusterOperator", Name: expected.Name, Namespace: Namespace},
				corev1.EventTypeNormal, "ClusterOperatorWait", "Run level %s: waiting on cluster operator %s: %s", level, expected.Name, uerr.Message)
		}
		if mode == payload.Reconciling {
			w.prog.taskDone()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(w.o.opts.OperatorPollInterval):
		}
	}
}

// Running is the version of the CVO the loop runs as (the one before an
// update hands over to the new one).
func (o *Operator) Running() string {
	o.runningMu.Lock()
	defer o.runningMu.Unlock()
	return o.running
}

func (o *Operator) setRunning(v string) {
	o.runningMu.Lock()
	o.running = v
	o.runningMu.Unlock()
}

// runningVersion reads the version the CVO's Deployment runs, which is
// what the CVO runs as after a restart.
func (o *Operator) runningVersion(ctx context.Context, fallback string) string {
	d, err := o.kube.AppsV1().Deployments(Namespace).Get(ctx, DeploymentName, metav1.GetOptions{})
	if err != nil {
		return fallback
	}
	return deploymentVersion(d, fallback)
}

func deploymentVersion(d *appsv1.Deployment, fallback string) string {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == VersionEnv && e.Value != "" {
				return e.Value
			}
		}
	}
	return fallback
}

// progress is where a worker's pass stands, for the status reports.
type progress struct {
	now func() time.Time

	mu        sync.Mutex
	version   string
	mode      payload.Mode
	done      int
	total     int
	completed bool
	failure   *payload.UpdateError
	failSince time.Time
	// failDone is how far the pass had come when it failed: a later pass
	// that gets further clears the failure.
	failDone int
	waits    map[string]*operatorWait
	// started is when each operator was first waited for in this update.
	started map[string]time.Time
	dirty   chan struct{}
}

type operatorWait struct {
	err   *payload.UpdateError
	level string
}

func newProgress(now func() time.Time) *progress {
	return &progress{now: now, waits: map[string]*operatorWait{}, started: map[string]time.Time{}, dirty: make(chan struct{}, 1)}
}

func (p *progress) changed() {
	select {
	case p.dirty <- struct{}{}:
	default:
	}
}

func (p *progress) start(version string, mode payload.Mode, total int) {
	p.mu.Lock()
	p.version, p.mode, p.done, p.total, p.completed = version, mode, 0, total, false
	p.waits = map[string]*operatorWait{}
	p.mu.Unlock()
}

func (p *progress) counts() (int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done, p.total
}

func (p *progress) taskDone() {
	p.mu.Lock()
	p.advanceLocked()
	p.mu.Unlock()
	p.changed()
}

func (p *progress) advanceLocked() {
	p.done++
	if p.failure != nil && p.done > p.failDone {
		p.failure = nil
	}
}

// waiting records that an operator is waited for; true the first time.
func (p *progress) waiting(name, level string, err *payload.UpdateError) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, known := p.waits[name]
	prev := p.waits[name]
	p.waits[name] = &operatorWait{err: err, level: level}
	if _, ok := p.started[name]; !ok {
		p.started[name] = p.now()
	}
	if prev == nil || prev.err.Reason != err.Reason {
		p.changed()
	}
	return !known
}

func (p *progress) operatorDone(name string) {
	p.mu.Lock()
	delete(p.waits, name)
	delete(p.started, name)
	p.advanceLocked()
	p.mu.Unlock()
	p.changed()
}

func (p *progress) waitErr() *payload.UpdateError {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.summaryLocked()
}

func (p *progress) summaryLocked() *payload.UpdateError {
	var errs []*payload.UpdateError
	if p.failure != nil {
		errs = append(errs, p.failure)
	}
	names := make([]string, 0, len(p.waits))
	for n := range p.waits {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		errs = append(errs, p.waits[n].err)
	}
	return payload.Summarize(errs)
}

// fail records what stopped the pass, and returns it.
func (p *progress) fail(e *payload.UpdateError) error {
	p.mu.Lock()
	if p.failure == nil || p.failure.Reason != e.Reason || p.failure.Message != e.Message {
		p.failSince = p.now()
	}
	p.failure, p.failDone = e, p.done
	p.mu.Unlock()
	p.changed()
	return e
}

func (p *progress) complete() {
	p.mu.Lock()
	p.completed, p.failure, p.waits, p.started = true, nil, map[string]*operatorWait{}, map[string]time.Time{}
	p.done = p.total
	p.mu.Unlock()
	p.changed()
}

// state is the SyncState of the pass, and the operators that are slow.
func (p *progress) state(slowAfter func(name string) time.Duration) (SyncState, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := SyncState{Version: p.version, Mode: p.mode, Done: p.done, Total: p.total, Completed: p.completed, Err: p.summaryLocked()}
	now := p.now()
	if s.Err != nil {
		since := p.failSince
		if p.failure == nil {
			since = now
		}
		for n := range p.waits {
			if t, ok := p.started[n]; ok && t.Before(since) {
				since = t
			}
		}
		s.ErrSince = now.Sub(since)
	}
	// Operators waited for (not failing) for longer than expected.
	var slow, slowMCO []string
	var slowFor, mcoFor time.Duration
	for n, w := range p.waits {
		limit := slowAfter(n)
		if w.err.Effect != payload.EffectNone || now.Sub(p.started[n]) <= limit {
			continue
		}
		if n == "machine-config" {
			slowMCO, mcoFor = append(slowMCO, n), limit
		} else {
			slow, slowFor = append(slow, n), limit
		}
	}
	sort.Strings(slow)
	var parts []string
	if len(slow) > 0 {
		parts = append(parts, fmt.Sprintf("%s over %s", strings.Join(slow, ", "), minutes(slowFor)))
	}
	if len(slowMCO) > 0 {
		parts = append(parts, fmt.Sprintf("machine-config over %s", minutes(mcoFor)))
	}
	msg := ""
	if len(parts) > 0 {
		msg = "waiting on " + strings.Join(parts, " and ") + " which is longer than expected"
	}
	return s, msg
}

// minutes words a threshold as the CVO does ("30 minutes").
func minutes(d time.Duration) string {
	if d >= time.Minute && d%time.Minute == 0 {
		return fmt.Sprintf("%d minutes", int(d/time.Minute))
	}
	return d.String()
}

// reportLoop writes the pass's progress into the ClusterVersion when it
// changes, and every second while operators are waited for (their
// waiting time counts towards Failing); it returns a stop function.
func (w *worker) reportLoop(ctx context.Context) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-w.prog.dirty:
			case <-tick.C:
			}
			w.report(ctx)
			// Coalesce bursts of progress into a few writes a second.
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return func() { cancel(); <-done }
}

func (w *worker) report(ctx context.Context) {
	w.prog.mu.Lock()
	started := w.prog.version != ""
	w.prog.mu.Unlock()
	if !started {
		return
	}
	if err := w.o.updateStatus(ctx, w.setProgress); err != nil && ctx.Err() == nil {
		klog.FromContext(ctx).V(2).Info("Reporting progress", "err", err)
	}
}

// setProgress writes Progressing, Failing and Available.
func (w *worker) setProgress(cv *configv1.ClusterVersion, now metav1.Time) {
	s, slow := w.prog.state(w.o.slowAfter)
	if s.Version == "" {
		return
	}
	progressing, failing, available := Conditions(s)
	if failing.Status == configv1.ConditionFalse && slow != "" {
		failing.Status, failing.Reason, failing.Message = configv1.ConditionUnknown, "SlowClusterOperator", slow
	}
	conds := []configv1.ClusterOperatorStatusCondition{failing, progressing}
	// A release applied before stays Available ("Done applying" it)
	// while the next one is applied or this one reconciled.
	if s.Completed || s.Mode == payload.Initializing {
		conds = append(conds, available)
	}
	for _, c := range conds {
		SetCondition(&cv.Status.Conditions, c, now)
	}
}

func (o *Operator) slowAfter(name string) time.Duration {
	if name == "machine-config" {
		return o.opts.SlowMachineConfigAfter
	}
	return o.opts.SlowOperatorAfter
}

func (p *progress) clearFailure() {
	p.mu.Lock()
	p.failure = nil
	p.mu.Unlock()
	p.changed()
}
