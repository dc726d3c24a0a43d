package sim

import (
	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/namespaces"
	"github.com/capstan-dev/capstan/internal/seeded"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

const (
	instanceDataKey = "instance.json"
	// maxPodsPerNode is bounded by the /23 pod range of each instance.
	maxPodsPerNode = 510
	// maxInstances is bounded by the 10.128.0.0/9 pod network split in /23s.
	maxInstances = 1 << 14
)

// CloudOptions tune the simulated cloud.
type CloudOptions struct {
	// BootDelay is how long a new instance stays pending before its kubelet
	// registers a Node.
	BootDelay time.Duration
	// TerminateDelay is how long a deleted instance is shutting-down before
	// it is gone.
	TerminateDelay time.Duration
	// Clock is injected for tests; the real clock by default.
	Clock clock.Clock
}

// FailureRule makes CreateInstance refuse matching specs.
type FailureRule struct {
	// Match selects the specs to refuse; nil matches every spec.
	Match func(InstanceSpec) bool
	// Err is what the cloud answers.
	Err *InstanceError
	// Times limits how often the rule fires; 0 means always.
	Times int
}

// APICloud is the simulated cloud. Each instance is a ConfigMap in the
// capstan-sim namespace, so instances survive restarts and any client can
// see them (`capstan kubectl get cm -n capstan-sim`).
type APICloud struct {
	client kubernetes.Interface
	opts   CloudOptions

	mu sync.Mutex
	// owner says its options are the cloud's own (PublishSettings): a
	// client that is not the owner launches and terminates instances
	// with the delays the owner published.
	owner    bool
	failures []*FailureRule
	// used are the indexes this process knows to be claimed (loaded from
	// the API on first use); the API, not this map, is the authority.
	used map[int]bool
}

var _ Cloud = (*APICloud)(nil)

// NewAPICloud returns a cloud storing its instances through client.
func NewAPICloud(client kubernetes.Interface, opts CloudOptions) *APICloud {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &APICloud{client: client, opts: opts}
}

// SetBootDelay changes how long the instances launched from now on stay
// pending: a simulation restores a snapshot's nodes at once, and gives
// the instances launched afterwards a cloud's boot time.
func (c *APICloud) SetBootDelay(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.opts.BootDelay = d
}

// SettingsConfigMap, in Namespace, holds the delays of the cloud's owner
// (capstan up, capstan sim): how long its instances take to boot and to
// terminate, whoever launches or deletes them (a Machine API run as a
// process of its own, say).
const SettingsConfigMap = "cloud-settings"

// PublishSettings makes c's delays the cloud's own: every other client
// of the cloud launches and terminates instances with them.
func (c *APICloud) PublishSettings(ctx context.Context) error {
	c.mu.Lock()
	c.owner = true
	data := map[string]string{"bootDelay": c.opts.BootDelay.String(), "terminateDelay": c.opts.TerminateDelay.String()}
	c.mu.Unlock()
	cms := c.client.CoreV1().ConfigMaps(Namespace)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: SettingsConfigMap, Namespace: Namespace}, Data: data}
	_, err := cms.Create(ctx, cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("publishing the cloud's settings: %w", err)
	}
	return nil
}

// delays are the boot and terminate delays c launches and deletes
// with: its own when it owns the cloud or was given some, else those the
// owner published (none published: none).
func (c *APICloud) delays(ctx context.Context) (boot, terminate time.Duration, err error) {
	c.mu.Lock()
	boot, terminate, own := c.opts.BootDelay, c.opts.TerminateDelay, c.owner || c.opts.BootDelay > 0 || c.opts.TerminateDelay > 0
	c.mu.Unlock()
	if own {
		return boot, terminate, nil
	}
	cm, err := c.client.CoreV1().ConfigMaps(Namespace).Get(ctx, SettingsConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("reading the cloud's settings: %w", err)
	}
	if boot, err = time.ParseDuration(cm.Data["bootDelay"]); err != nil {
		return 0, 0, fmt.Errorf("the cloud's settings (%s/%s): bootDelay: %w", Namespace, SettingsConfigMap, err)
	}
	if terminate, err = time.ParseDuration(cm.Data["terminateDelay"]); err != nil {
		return 0, 0, fmt.Errorf("the cloud's settings (%s/%s): terminateDelay: %w", Namespace, SettingsConfigMap, err)
	}
	return boot, terminate, nil
}

// InjectFailure adds a rule that makes CreateInstance fail.
func (c *APICloud) InjectFailure(rule FailureRule) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := rule
	c.failures = append(c.failures, &r)
}

// ClearFailures removes every injected failure.
func (c *APICloud) ClearFailures() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures = nil
}

func (c *APICloud) injectedFailure(spec InstanceSpec) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range c.failures {
		if r.Match != nil && !r.Match(spec) {
			continue
		}
		if r.Times > 0 {
			r.Times--
			if r.Times == 0 {
				c.failures = append(c.failures[:i], c.failures[i+1:]...)
			}
		}
		return r.Err
	}
	return nil
}

// EnsureNamespace creates the namespace instances live in.
func EnsureNamespace(ctx context.Context, client kubernetes.Interface) error {
	return namespaces.Ensure(ctx, client, Namespace)
}

// CreateInstance launches an instance after validating its spec.
func (c *APICloud) CreateInstance(ctx context.Context, spec InstanceSpec) (*Instance, error) {
	spec = spec.WithDefaults()
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := c.injectedFailure(spec); err != nil {
		return nil, err
	}
	if err := EnsureNamespace(ctx, c.client); err != nil {
		return nil, err
	}
	if spec.Name == "" {
		spec.Name = generateName(spec)
	}
	if spec.Machine != "" {
		existing, err := c.GetInstance(ctx, spec.Name)
		switch {
		case err == nil && spec.ClientToken != "" && existing.Spec.ClientToken == spec.ClientToken:
			// The same request again: the instance it launched.
			return existing, nil
		case err == nil && spec.ClientToken == "":
			// No token: the cloud cannot tell a retry from a new
			// request, and launches another instance.
			spec.Name = spec.Name + "-" + RandomSuffix()
		case err != nil && !errors.Is(err, ErrInstanceNotFound):
			return nil, err
		}
	}
	if err := c.zoneCapacity(ctx, spec); err != nil {
		return nil, err
	}
	idx, err := c.claimIndex(ctx, spec.Name)
	if err != nil {
		return nil, err
	}
	boot, _, err := c.delays(ctx)
	if err != nil {
		_ = c.releaseIndex(ctx, idx, spec.Name)
		return nil, err
	}
	now := c.opts.Clock.Now().UTC().Truncate(time.Millisecond)
	id := "i-" + seeded.String(17, "0123456789abcdef")
	inst := &Instance{
		Spec:       spec,
		ID:         id,
		ProviderID: ProviderIDPrefix + spec.Zone + "/" + id,
		Index:      idx,
		InternalIP: nodeIP(idx).String(),
		PodCIDR:    podCIDR(idx).String(),
		LaunchTime: now,
		BootedAt:   now.Add(boot),
	}
	cm, err := instanceToConfigMap(inst)
	if err != nil {
		_ = c.releaseIndex(ctx, idx, spec.Name)
		return nil, err
	}
	if _, err := c.client.CoreV1().ConfigMaps(Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		_ = c.releaseIndex(ctx, idx, spec.Name)
		if apierrors.IsAlreadyExists(err) {
			return nil, &InstanceError{Reason: ReasonAlreadyExists, Message: fmt.Sprintf("an instance named %s already exists", spec.Name)}
		}
		return nil, fmt.Errorf("creating instance %s: %w", spec.Name, err)
	}
	if err := failpoint.Fail(failpoint.CloudCreateAnswerLost); err != nil {
		return nil, fmt.Errorf("creating instance %s: %w", spec.Name, err)
	}
	return inst, nil
}

// DeleteInstance starts terminating the instance.
func (c *APICloud) DeleteInstance(ctx context.Context, name string) error {
	cms := c.client.CoreV1().ConfigMaps(Namespace)
	for {
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading instance %s: %w", name, err)
		}
		inst, err := InstanceFromConfigMap(cm)
		if err != nil {
			return err
		}
		if inst.TerminateAt != nil {
			return nil
		}
		_, terminate, err := c.delays(ctx)
		if err != nil {
			return err
		}
		if terminate <= 0 {
			return c.remove(ctx, cm, inst)
		}
		at := c.opts.Clock.Now().UTC().Add(terminate).Truncate(time.Millisecond)
		inst.TerminateAt = &at
		updated, err := instanceToConfigMap(inst)
		if err != nil {
			return err
		}
		updated.ResourceVersion = cm.ResourceVersion
		_, err = cms.Update(ctx, updated, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("terminating instance %s: %w", name, err)
		}
		return nil
	}
}

// remove deletes the instance's ConfigMap, guarded by its UID so that a
// newer instance of the same name is never removed by mistake.
func (c *APICloud) remove(ctx context.Context, cm *corev1.ConfigMap, inst *Instance) error {
	uid := cm.UID
	err := c.client.CoreV1().ConfigMaps(Namespace).Delete(ctx, cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("removing instance %s: %w", cm.Name, err)
	}
	return c.releaseIndex(ctx, inst.Index, inst.Name())
}

// GetInstance returns a live instance.
func (c *APICloud) GetInstance(ctx context.Context, name string) (*Instance, error) {
	cm, err := c.client.CoreV1().ConfigMaps(Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, ErrInstanceNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("reading instance %s: %w", name, err)
	}
	inst, err := InstanceFromConfigMap(cm)
	if err != nil {
		return nil, err
	}
	if c.expired(inst) {
		if err := c.remove(ctx, cm, inst); err != nil {
			return nil, err
		}
		return nil, ErrInstanceNotFound
	}
	return inst, nil
}

// ListInstances returns live instances sorted by name.
func (c *APICloud) ListInstances(ctx context.Context) ([]*Instance, error) {
	list, err := c.client.CoreV1().ConfigMaps(Namespace).List(ctx, metav1.ListOptions{LabelSelector: InstanceLabel})
	if err != nil {
		return nil, fmt.Errorf("listing instances: %w", err)
	}
	out := make([]*Instance, 0, len(list.Items))
	for i := range list.Items {
		inst, err := InstanceFromConfigMap(&list.Items[i])
		if err != nil {
			return nil, err
		}
		if c.expired(inst) {
			continue
		}
		out = append(out, inst)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out, nil
}

func (c *APICloud) expired(inst *Instance) bool {
	return inst.TerminateAt != nil && !c.opts.Clock.Now().Before(*inst.TerminateAt)
}

// Instance indexes (which derive addresses and pod ranges) are claimed
// through the API, so that every process serving the cloud — capstan up
// and a `capstan sim node add` beside it — hands out each one once: a
// ConfigMap named after the index is created for the instance, and that
// creation is the claim.
const (
	// IndexClaimLabel marks the ConfigMaps that claim instance indexes.
	IndexClaimLabel       = "sim.capstan.dev/index-claim"
	indexClaimInstanceKey = "instance"
	// staleClaimAge is how old a claim whose instance does not exist must
	// be before it is taken back: its creator died between the two
	// creations (which are milliseconds apart).
	staleClaimAge = time.Minute
)

func indexClaimName(idx int) string { return fmt.Sprintf("instance-index-%05d", idx) }

// claimIndex claims the lowest free index for instance name. The indexes
// this process knows to be held are skipped without asking the API; one
// released by another process is found again when this one next loads
// them (at start, or when every index looks taken).
func (c *APICloud) claimIndex(ctx context.Context, name string) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.used == nil {
		if err := c.loadIndexesLocked(ctx); err != nil {
			return 0, err
		}
	}
	cms := c.client.CoreV1().ConfigMaps(Namespace)
	reloaded := false
	for i := 0; i < maxInstances; i++ {
		if i == maxInstances-1 && c.used[i] && !reloaded {
			// Every index looks taken: some may have been released by
			// other processes since this one looked. Look again.
			if err := c.loadIndexesLocked(ctx); err != nil {
				return 0, err
			}
			reloaded, i = true, -1
			continue
		}
		if c.used[i] {
			continue
		}
		claim := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: indexClaimName(i), Namespace: Namespace, Labels: map[string]string{IndexClaimLabel: "true"}},
			Data:       map[string]string{indexClaimInstanceKey: name},
		}
		_, err := cms.Create(ctx, claim, metav1.CreateOptions{})
		switch {
		case err == nil:
			c.used[i] = true
			return i, nil
		case !apierrors.IsAlreadyExists(err):
			return 0, fmt.Errorf("claiming instance index %d: %w", i, err)
		}
		reclaimed, err := c.reclaimStaleLocked(ctx, i)
		if err != nil {
			return 0, err
		}
		if reclaimed {
			i-- // try this index again
			continue
		}
		c.used[i] = true // claimed by someone else
	}
	return 0, &InstanceError{Reason: ReasonInsufficientCapacity, Message: fmt.Sprintf("the simulated cloud holds at most %d instances", maxInstances)}
}

// loadIndexesLocked reads which indexes are held by existing instances,
// and claims those of instances created before claims existed (a data dir
// of an older capstan). Claims without their instance are not counted:
// claimIndex tries them, and takes them back once stale.
func (c *APICloud) loadIndexesLocked(ctx context.Context) error {
	cms := c.client.CoreV1().ConfigMaps(Namespace)
	claims, err := cms.List(ctx, metav1.ListOptions{LabelSelector: IndexClaimLabel})
	if err != nil {
		return fmt.Errorf("listing instance index claims: %w", err)
	}
	claimed := map[int]bool{}
	for _, cm := range claims.Items {
		var idx int
		if _, err := fmt.Sscanf(cm.Name, "instance-index-%d", &idx); err == nil {
			claimed[idx] = true
		}
	}
	insts, err := cms.List(ctx, metav1.ListOptions{LabelSelector: InstanceLabel})
	if err != nil {
		return fmt.Errorf("listing instances: %w", err)
	}
	used := map[int]bool{}
	for i := range insts.Items {
		inst, err := InstanceFromConfigMap(&insts.Items[i])
		if err != nil {
			continue
		}
		used[inst.Index] = true
		if claimed[inst.Index] {
			continue
		}
		claim := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: indexClaimName(inst.Index), Namespace: Namespace, Labels: map[string]string{IndexClaimLabel: "true"}},
			Data:       map[string]string{indexClaimInstanceKey: inst.Name()},
		}
		if _, err := cms.Create(ctx, claim, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("claiming the index of instance %s: %w", inst.Name(), err)
		}
	}
	c.used = used
	return nil
}

// reclaimStaleLocked deletes the claim of index idx if its instance does
// not exist and the claim is older than staleClaimAge.
func (c *APICloud) reclaimStaleLocked(ctx context.Context, idx int) (bool, error) {
	cms := c.client.CoreV1().ConfigMaps(Namespace)
	claim, err := cms.Get(ctx, indexClaimName(idx), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil // released meanwhile
	}
	if err != nil {
		return false, fmt.Errorf("reading the claim of instance index %d: %w", idx, err)
	}
	if c.opts.Clock.Since(claim.CreationTimestamp.Time) < staleClaimAge {
		return false, nil
	}
	inst, err := cms.Get(ctx, claim.Data[indexClaimInstanceKey], metav1.GetOptions{})
	if err == nil {
		if i, err := InstanceFromConfigMap(inst); err != nil || i.Index == idx {
			return false, nil
		}
	} else if !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("reading instance %s: %w", claim.Data[indexClaimInstanceKey], err)
	}
	uid := claim.UID
	err = cms.Delete(ctx, claim.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return false, fmt.Errorf("taking back stale instance index %d: %w", idx, err)
	}
	return true, nil
}

// releaseIndex gives back the index of instance name once the instance is
// gone; a claim that is no longer this instance's (released already, and
// claimed again) is left alone.
func (c *APICloud) releaseIndex(ctx context.Context, idx int, name string) error {
	cms := c.client.CoreV1().ConfigMaps(Namespace)
	claim, err := cms.Get(ctx, indexClaimName(idx), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the claim of instance index %d: %w", idx, err)
	}
	if claim.Data[indexClaimInstanceKey] != name {
		return nil
	}
	uid := claim.UID
	err = cms.Delete(ctx, claim.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("releasing instance index %d: %w", idx, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.used != nil {
		delete(c.used, idx)
	}
	return nil
}

// nodeIP is 10.0.0.0/16 plus the index (skipping .0).
func nodeIP(idx int) netip.Addr {
	n := idx + 10
	return netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)})
}

// podCIDR gives each instance a /23 of 10.128.0.0/9.
func podCIDR(idx int) netip.Prefix {
	base := uint32(10)<<24 | uint32(128)<<16 | uint32(idx)<<9
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(base >> 24), byte(base >> 16), byte(base >> 8), byte(base)}), 23)
}

// WithDefaults fills in what the cloud defaults: region and zone, an
// instance type named after the size, 250 pods, the worker role.
func (s InstanceSpec) WithDefaults() InstanceSpec {
	if s.Region == "" {
		s.Region = DefaultRegion
	}
	if s.Zone == "" {
		s.Zone = DefaultZones[0]
	}
	if s.InstanceType == "" {
		s.InstanceType = "sim." + s.CPU.String() + "cpu-" + s.Memory.String()
	}
	if s.Pods == 0 {
		s.Pods = 250
	}
	if s.Role == "" {
		s.Role = "worker"
	}
	return s
}

// Defaults of the simulated region.
var (
	DefaultRegion = "sim-region"
	DefaultZones  = []string{"sim-zone-a", "sim-zone-b", "sim-zone-c"}
)

const nameAlphabet = "bcdfghjklmnpqrstvwxz2456789"

// RandomSuffix is five characters of the kind Kubernetes' generateName
// adds (no vowels, no look-alike digits).
func RandomSuffix() string {
	return seeded.String(5, nameAlphabet)
}

func generateName(spec InstanceSpec) string {
	return spec.Role + "-" + spec.Zone + "-" + RandomSuffix()
}

// instanceLabels are the labels of an instance's ConfigMap.
func instanceLabels(inst *Instance) map[string]string {
	l := map[string]string{InstanceLabel: "true", LabelZone: inst.Spec.Zone, "sim.capstan.dev/role": inst.Spec.Role}
	if inst.Spec.Machine != "" {
		l[MachineLabel] = inst.Spec.Machine
	}
	return l
}

func instanceToConfigMap(inst *Instance) (*corev1.ConfigMap, error) {
	raw, err := json.Marshal(inst)
	if err != nil {
		return nil, fmt.Errorf("encoding instance %s: %w", inst.Name(), err)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:        inst.Name(),
			Namespace:   Namespace,
			Labels:      instanceLabels(inst),
			Annotations: map[string]string{"sim.capstan.dev/index": strconv.Itoa(inst.Index)},
		},
		Data: map[string]string{instanceDataKey: string(raw)},
	}, nil
}

// InstanceFromConfigMap reads the instance a ConfigMap of the simulated
// cloud stores.
func InstanceFromConfigMap(cm *corev1.ConfigMap) (*Instance, error) {
	raw, ok := cm.Data[instanceDataKey]
	if !ok {
		return nil, fmt.Errorf("instance %s/%s has no %s", cm.Namespace, cm.Name, instanceDataKey)
	}
	inst := &Instance{}
	if err := json.Unmarshal([]byte(raw), inst); err != nil {
		return nil, fmt.Errorf("instance %s/%s is corrupt: %w", cm.Namespace, cm.Name, err)
	}
	return inst, nil
}

// PowerOn starts the node of an instance that was stopped, with the
// cloud's own identity: the etcd operator, which starts the member of a
// control-plane machine powered on while the API was down, asks the
// cloud for the node rather than patching nodes itself.
func (c *APICloud) PowerOn(ctx context.Context, node string) error {
	return StartNode(ctx, c.client, node)
}
