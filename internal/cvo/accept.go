package cvo

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	configv1 "github.com/openshift/api/config/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/cvo/payload"
	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/release"
	"github.com/capstan-dev/capstan/internal/seeded"
)

// accept takes a new release on, as the CVO's payload sync does:
// retrieve and verify it, download it with a Job while loading it, check
// its version and the preconditions, then record it as desired with a new
// Partial history entry. Each step is an event on the ClusterVersion and
// the ReleaseAccepted condition.
func (w *worker) accept(ctx context.Context, cv *configv1.ClusterVersion) (*release.Image, error) {
	o, t := w.o, w.target
	mode := payload.Updating
	if modeOf(cv, t) == payload.Initializing {
		mode = payload.Initializing
	}
	w.prog.start(versionOrImage(t.Version, t.Image), mode, 0)
	w.prog.changed()
	msg := fmt.Sprintf("Retrieving and verifying payload version=%q image=%q", t.Version, t.Image)
	w.event(corev1.EventTypeNormal, "RetrievePayload", msg)
	if err := o.setReleaseAccepted(ctx, configv1.ConditionUnknown, "RetrievePayload", msg); err != nil {
		return nil, err
	}
	retrieveFailed := func(e *payload.UpdateError) error {
		return w.acceptFailed(ctx, "RetrievePayload", fmt.Sprintf("Retrieving payload failed version=%q image=%q failure=%v", t.Version, t.Image, e), e)
	}

	var risks []string
	verified := false
	vctx, cancel := context.WithTimeout(ctx, o.opts.RetrieveTimeout/2)
	verr := o.verify(vctx, cv, t.Image)
	cancel()
	switch {
	case verr == nil:
		verified = true
	case !t.Force:
		return nil, retrieveFailed(&payload.UpdateError{Effect: payload.EffectFail, Reason: "ImageVerificationFailed",
			Message: "The update cannot be verified: " + verr.Error(), Nested: verr})
	default:
		risks = append(risks, fmt.Sprintf("Target release version=%q image=%q cannot be verified, but continuing anyway because the update was forced: %v", t.Version, t.Image, verr))
	}

	// The Job prepares the payload on a node while the CVO reads it.
	var (
		img     *release.Image
		readErr error
		wg      sync.WaitGroup
	)
	rctx, cancel := context.WithTimeout(ctx, o.opts.RetrieveTimeout)
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		img, readErr = readRelease(rctx, t.Image)
	}()
	jobErr := w.runJob(rctx)
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if jobErr == nil {
		failpoint.Hit(failpoint.CVORetrieved)
	}
	if jobErr != nil {
		return nil, retrieveFailed(&payload.UpdateError{Effect: payload.EffectFail, Reason: "UpdatePayloadRetrievalFailed",
			Message: "Unable to download and prepare the update: " + jobErr.Error(), Nested: jobErr})
	}
	if readErr != nil && retrievalError(readErr) {
		return nil, retrieveFailed(&payload.UpdateError{Effect: payload.EffectFail, Reason: "UpdatePayloadRetrievalFailed",
			Message: "Unable to download and prepare the update: " + readErr.Error(), Nested: readErr})
	}
	w.event(corev1.EventTypeNormal, "LoadPayload", fmt.Sprintf("Loading payload version=%q image=%q", t.Version, t.Image))
	if readErr == nil {
		readErr = sameDigest(t.Image, img)
	}
	if readErr != nil {
		return nil, w.acceptFailed(ctx, "LoadPayload", fmt.Sprintf("Loading payload failed version=%q image=%q failure=%v", t.Version, t.Image, readErr),
			&payload.UpdateError{Effect: payload.EffectFail, Reason: "UpdatePayloadIntegrity", Message: "The content of the update is invalid: " + readErr.Error(), Nested: readErr})
	}
	version := img.Payload.Metadata.Version
	// Every manifest is read before the release is taken on: a corrupt
	// one refuses it here, with the desired release and the history as
	// they were (upstream's LoadPayload step), not after.
	if _, err := payload.Load(img.Payload); err != nil {
		return nil, w.acceptFailed(ctx, "LoadPayload", fmt.Sprintf("Loading payload failed version=%q image=%q failure=%v", t.Version, t.Image, err),
			&payload.UpdateError{Effect: payload.EffectFail, Reason: "UpdatePayloadIntegrity", Message: "The content of the update is invalid: " + err.Error(), Nested: err})
	}
	if t.Version != "" && version != t.Version {
		err := fmt.Errorf("release image version %s does not match the expected upstream version %s", version, t.Version)
		return nil, w.acceptFailed(ctx, "VerifyPayloadVersion", fmt.Sprintf("Verifying payload failed version=%q image=%q failure=%v", t.Version, t.Image, err),
			&payload.UpdateError{Effect: payload.EffectFail, Reason: "UpdatePayloadIntegrity", Message: "The content of the update is invalid: " + err.Error(), Nested: err})
	}

	// The release the cluster already runs is not checked again.
	if mode != payload.Initializing && t.Image != cv.Status.Desired.Image {
		fresh, err := o.client.ConfigV1().ClusterVersions().Get(ctx, Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		errs := append(Preconditions(fresh, version), recommendedUpdate(fresh, version)...)
		if summary, block := SummarizePreconditions(errs); summary != "" {
			switch {
			case block && !t.Force:
				w.event(corev1.EventTypeWarning, "PreconditionBlock", fmt.Sprintf("Preconditions failed for payload loaded version=%q image=%q: %s", version, t.Image, summary))
				return nil, w.acceptFailed(ctx, "PreconditionChecks", fmt.Sprintf("Preconditions failed for payload loaded version=%q image=%q: %s", version, t.Image, summary),
					&payload.UpdateError{Effect: payload.EffectFail, Reason: "UpgradePreconditionCheckFailed", Message: summary})
			case block:
				risks = append(risks, "Forced through blocking failures: "+summary)
			default:
				risks = append(risks, summary)
			}
			w.event(corev1.EventTypeWarning, "PreconditionWarn", fmt.Sprintf("precondition warning for payload loaded version=%q image=%q: %s", version, t.Image, summary))
		}
		w.event(corev1.EventTypeNormal, "PreconditionsPassed", fmt.Sprintf("preconditions passed for payload loaded version=%q image=%q", version, t.Image))
	}

	if err := o.pinDigest(ctx, t.Image, img.Digest); err != nil {
		return nil, err
	}
	msg = fmt.Sprintf("Payload loaded version=%q image=%q", version, t.Image)
	w.event(corev1.EventTypeNormal, "PayloadLoaded", msg)
	o.opts.Timeline.accepted(version, time.Now())
	o.cache(t.Image, img)
	w.prog.clearFailure()
	err := o.updateStatus(ctx, func(cv *configv1.ClusterVersion, now metav1.Time) {
		desired := configv1.Release{Version: version, Image: t.Image}
		for _, r := range cv.Status.AvailableUpdates {
			if r.Image == t.Image || r.Version == version {
				desired.URL, desired.Channels = r.URL, r.Channels
			}
		}
		for _, cu := range cv.Status.ConditionalUpdates {
			if cu.Release.Image == t.Image {
				desired.URL, desired.Channels = cu.Release.URL, cu.Release.Channels
			}
		}
		if desired.URL == "" {
			desired.URL = configv1.URL(img.Payload.Metadata.Metadata[release.URLMetadata])
		}
		cv.Status.Desired = desired
		cv.Status.History = MergeHistory(cv.Status.History, desired, false, verified, strings.Join(risks, "\n"), now)
		cv.Status.ObservedGeneration = cv.Generation
		SetCondition(&cv.Status.Conditions, configv1.ClusterOperatorStatusCondition{Type: ReleaseAccepted, Status: configv1.ConditionTrue, Reason: "PayloadLoaded",
			Message: fmt.Sprintf("Payload loaded version=%q image=%q architecture=%q", version, t.Image, o.opts.Architecture)}, now)
	})
	return img, err
}

// acceptFailed reports a failed step: a warning event, ReleaseAccepted
// False with the step as reason, and the error as the pass's failure.
func (w *worker) acceptFailed(ctx context.Context, step, msg string, e *payload.UpdateError) error {
	w.event(corev1.EventTypeWarning, step+"Failed", msg)
	err := w.prog.fail(e)
	// One write, so ReleaseAccepted and Failing never disagree.
	if werr := w.o.updateStatus(ctx, func(cv *configv1.ClusterVersion, now metav1.Time) {
		SetCondition(&cv.Status.Conditions, configv1.ClusterOperatorStatusCondition{Type: ReleaseAccepted, Status: configv1.ConditionFalse, Reason: step, Message: msg}, now)
		w.setProgress(cv, now)
	}); werr != nil {
		return werr
	}
	return err
}

// event records an event on the ClusterVersion, once per worker: the same
// step retried for the same target says nothing new, and would use up the
// event recorder's allowance for the ClusterVersion (its spam filter),
// so that the events of the next update would be dropped.
func (w *worker) event(eventType, reason, msg string) {
	key := eventType + "\x00" + reason + "\x00" + msg
	if w.emitted[key] {
		return
	}
	if w.emitted == nil {
		w.emitted = map[string]bool{}
	}
	w.emitted[key] = true
	w.o.recorder.Event(ClusterVersionRef, eventType, reason, msg)
}

func (o *Operator) setReleaseAccepted(ctx context.Context, status configv1.ConditionStatus, reason, msg string) error {
	return o.updateStatus(ctx, func(cv *configv1.ClusterVersion, now metav1.Time) {
		SetCondition(&cv.Status.Conditions, configv1.ClusterOperatorStatusCondition{Type: ReleaseAccepted, Status: status, Reason: reason, Message: msg}, now)
	})
}

// retrievalError tells a failure to fetch an image from a failure of its
// content.
func retrievalError(err error) bool {
	var terr *transport.Error
	var nerr net.Error
	return errors.As(err, &terr) || errors.As(err, &nerr) || errors.Is(err, context.DeadlineExceeded)
}

func readRelease(ctx context.Context, image string) (*release.Image, error) {
	ref, err := release.ParseRef(image)
	if err != nil {
		return nil, err
	}
	return release.Read(ctx, ref)
}

// sameDigest checks that what was read is the image the reference names
// by digest, the one whose signature was verified: release.Read hashes
// it, and this ties the two together.
func sameDigest(image string, img *release.Image) error {
	ref, err := release.ParseRef(image)
	if err != nil {
		return err
	}
	d := ref.Digest()
	if d == "" || d == img.Digest.String() {
		return nil
	}
	want, err := v1.NewHash(d)
	if err != nil {
		return err
	}
	return &release.DigestMismatchError{What: "release image " + image, Want: want, Got: img.Digest}
}

// PinsConfigMap, in the CVO's namespace, pins each release accepted by
// tag (only a forced update takes one) to the digest it was read at when
// it was accepted: key pinKey(image), value "<digest> <image>". A tag
// moved since is not what the cluster applies or takes its verification
// keys from. The pins are the CVO's own: kept in its namespace, not on
// the ClusterVersion, which whoever may set an update may edit.
const PinsConfigMap = "accepted-release-digests"

// pinKey is the key of an image's pin (a ConfigMap key cannot hold a
// pull spec's characters).
func pinKey(image string) string {
	return fmt.Sprintf("pin-%x", sha256.Sum256([]byte(image)))[:36]
}

// acceptedRef is the reference a release accepted as image is read by
// again: image itself when it names a digest, else the digest pinned
// when it was accepted. A tag without a pin is not read: what it names
// now is not what was accepted.
func (o *Operator) acceptedRef(ctx context.Context, image string) (release.Ref, error) {
	ref, err := release.ParseRef(image)
	if err != nil || ref.Digest() != "" {
		return ref, err
	}
	if o.kube == nil {
		return release.Ref{}, fmt.Errorf("the release %s was accepted by tag, and this CVO has no Kubernetes client to read its pin with", image)
	}
	cm, err := o.kube.CoreV1().ConfigMaps(Namespace).Get(ctx, PinsConfigMap, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return release.Ref{}, err
	}
	var pin string
	if cm != nil {
		pin = cm.Data[pinKey(image)]
	}
	digest, pinned, ok := strings.Cut(pin, " ")
	if !ok || pinned != image {
		return release.Ref{}, fmt.Errorf("the release %s was accepted by tag, and %s/%s holds no digest for it: not reading whatever the tag names now", image, Namespace, PinsConfigMap)
	}
	if _, err := v1.NewHash(digest); err != nil {
		return release.Ref{}, fmt.Errorf("%s/%s, the pin of %s: %w", Namespace, PinsConfigMap, image, err)
	}
	return ref.ByDigest(digest), nil
}

// pinDigest records the digest a release accepted by tag was read at.
func (o *Operator) pinDigest(ctx context.Context, image string, digest v1.Hash) error {
	ref, err := release.ParseRef(image)
	if err != nil || ref.Digest() != "" {
		return err
	}
	if o.kube == nil {
		return fmt.Errorf("the release %s is accepted by tag, and this CVO has no Kubernetes client to pin its digest with", image)
	}
	cms := o.kube.CoreV1().ConfigMaps(Namespace)
	_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: PinsConfigMap, Namespace: Namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	patch, err := json.Marshal(map[string]any{"data": map[string]string{pinKey(image): digest.String() + " " + image}})
	if err != nil {
		return err
	}
	_, err = cms.Patch(ctx, PinsConfigMap, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// loadAccepted reads a release accepted before (after a restart, or
// while reconciling): it is not verified or checked again, and is read
// by the digest it was accepted at.
func (o *Operator) loadAccepted(ctx context.Context, cv *configv1.ClusterVersion, t target) (*release.Image, error) {
	o.loadedMu.Lock()
	img := o.loaded[t.Image]
	o.loadedMu.Unlock()
	if img != nil {
		return img, nil
	}
	ref, err := o.acceptedRef(ctx, t.Image)
	if err == nil {
		img, err = release.Read(ctx, ref)
	}
	if err != nil {
		return nil, &payload.UpdateError{Effect: payload.EffectFail, Reason: "UpdatePayloadRetrievalFailed",
			Message: "Unable to download and prepare the update: " + err.Error(), Nested: err}
	}
	o.cache(t.Image, img)
	return img, nil
}

// releaseCreated is when the release image was created, if the operator
// has read it (zero otherwise).
func (o *Operator) releaseCreated(image string) time.Time {
	o.loadedMu.Lock()
	defer o.loadedMu.Unlock()
	if img := o.loaded[image]; img != nil && img.Config != nil {
		return img.Config.Created.Time
	}
	return time.Time{}
}

// cache keeps the last releases read (an update's source and target, and
// the running release its verifier comes from).
func (o *Operator) cache(image string, img *release.Image) {
	o.loadedMu.Lock()
	defer o.loadedMu.Unlock()
	if len(o.loaded) >= 4 {
		clear(o.loaded)
	}
	o.loaded[image] = img
}

// runJob runs the Job that prepares the release on a node, as the CVO's
// version-<version>-<random> Job does, and waits for it to complete.
func (w *worker) runJob(ctx context.Context) error {
	t := w.target
	suffix := t.Version
	if suffix == "" {
		_, digest, _ := strings.Cut(t.Image, "@sha256:")
		suffix = digest[:min(len(digest), 12)]
	}
	jobs := w.o.kube.BatchV1().Jobs(Namespace)
	// The retrieval of this very image, by an earlier pass (a CVO
	// stopped before it took the release on): a finished one is used, a
	// running one waited for, a failed one replaced. The payload is
	// retrieved once, as upstream reuses its extracted directory.
	imageHash := fmt.Sprintf("%x", sha256.Sum256([]byte(t.Image)))[:16]
	earlier, err := jobs.List(ctx, metav1.ListOptions{LabelSelector: retrievedImageLabel + "=" + imageHash})
	if err != nil {
		return fmt.Errorf("listing the retrieval jobs of %s: %w", t.Image, err)
	}
	for i := range earlier.Items {
		j := &earlier.Items[i]
		switch {
		case j.DeletionTimestamp != nil:
		case jobFailed(j):
			if err := jobs.Delete(ctx, j.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting the failed retrieval job %s: %w", j.Name, err)
			}
		default:
			return w.waitJob(ctx, j.Name)
		}
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("version-%s-%s", suffix, seeded.String(5, "bcdfghjklmnpqrstvwxz2456789")), Namespace: Namespace,
			Labels: map[string]string{"k8s-app": "retrieve-openshift-release", retrievedImageLabel: imageHash}},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To(int32(0)),
			ActiveDeadlineSeconds: ptr.To(int64(w.o.opts.RetrieveTimeout / time.Second)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"k8s-app": "retrieve-openshift-release"}},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					PriorityClassName:            "system-cluster-critical",
					AutomountServiceAccountToken: ptr.To(false),
					NodeSelector:                 map[string]string{"node-role.kubernetes.io/master": ""},
					Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{Name: "payload", Image: t.Image,
						Command:   []string{"/bin/sh", "-c", "mkdir -p /etc/cvo/updatepayloads/" + suffix + " && cp -r /manifests /release-manifests /etc/cvo/updatepayloads/" + suffix},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}}}},
				},
			},
		},
	}
	created, err := jobs.Create(ctx, job, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating job %s/%s: %w", Namespace, job.Name, err)
	}
	return w.waitJob(ctx, created.Name)
}

// retrievedImageLabel on a retrieval Job: a hash of the image it
// retrieves.
const retrievedImageLabel = "release.capstan.dev/image-hash"

func jobFailed(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// waitJob waits until the retrieval Job name completes or fails.
func (w *worker) waitJob(ctx context.Context, name string) error {
	jobs := w.o.kube.BatchV1().Jobs(Namespace)
	for {
		got, err := jobs.Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			return err
		}
		if err == nil {
			for _, c := range got.Status.Conditions {
				if c.Status != corev1.ConditionTrue {
					continue
				}
				switch c.Type {
				case batchv1.JobComplete:
					return nil
				case batchv1.JobFailed:
					return fmt.Errorf("job %s has failed: %s: %s", got.Name, c.Reason, c.Message)
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("job %s did not complete: %w", name, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// recommendedUpdate warns (without blocking) of an update that is not a
// recommended one, as the CVO's ClusterVersionRecommendedUpdate
// precondition does: the warning is kept in history's acceptedRisks.
func recommendedUpdate(cv *configv1.ClusterVersion, version string) []*PreconditionError {
	for _, r := range cv.Status.AvailableUpdates {
		if r.Version == version {
			return nil
		}
	}
	for _, cu := range cv.Status.ConditionalUpdates {
		if cu.Release.Version != version {
			continue
		}
		if c := notRecommended(cu); c != nil {
			return []*PreconditionError{{Name: "ClusterVersionRecommendedUpdate", Reason: c.Reason, NonBlocking: true,
				Message: fmt.Sprintf("Update from %s to %s is not recommended:\n\n%s", cv.Status.Desired.Version, version, c.Message)}}
		}
		return nil
	}
	if cv.Spec.Channel == "" {
		return []*PreconditionError{{Name: "ClusterVersionRecommendedUpdate", Reason: "NoChannel", NonBlocking: true,
			Message: "Configured channel is unset, so the recommended status of updating from " + cv.Status.Desired.Version + " to " + version + " is unknown."}}
	}
	return []*PreconditionError{{Name: "ClusterVersionRecommendedUpdate", Reason: "UnknownUpdate", NonBlocking: true,
		Message: fmt.Sprintf("RetrievedUpdates=%s, so the recommended status of updating from %s to %s is unknown.", retrieved(cv), cv.Status.Desired.Version, version)}}
}

func retrieved(cv *configv1.ClusterVersion) string {
	if c := FindCondition(cv.Status.Conditions, configv1.RetrievedUpdates); c != nil {
		return string(c.Status)
	}
	return "Unknown"
}
