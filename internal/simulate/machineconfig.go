package simulate

import (
	"context"
	"errors"
	"fmt"
	"github.com/capstan-dev/capstan/internal/simclock"
	"slices"
	"sort"
	"strings"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/retry"

	"github.com/capstan-dev/capstan/internal/mco"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

// Timings of the simulated machine-config-daemon, in simulated time.
const (
	// DefaultRebootTime is how long a node is down when it reboots into a
	// new configuration.
	DefaultRebootTime = 3 * time.Minute
	// mcdApplyTime is how long the daemon takes to write a configuration
	// and pull the OS image before rebooting.
	mcdApplyTime = 30 * time.Second
	// mcdDrainTimeout bounds one drain attempt and mcdDrainRetry is the
	// wait before the next, as the MCO's drain controller requeues a
	// drain a minute later.
	mcdDrainTimeout = 90 * time.Second
	mcdDrainRetry   = time.Minute
)

// snapshotPools are the snapshot's MachineConfigPools, by name.
func snapshotPools(s *Snapshot) ([]*mcfgv1.MachineConfigPool, error) {
	objs, _ := s.Get(resourceOf("MachineConfigPool"))
	var out []*mcfgv1.MachineConfigPool
	for i := range objs {
		p, err := typed[mcfgv1.MachineConfigPool](&objs[i])
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// snapshotConfigs are the snapshot's MachineConfigs, by name.
func snapshotConfigs(s *Snapshot) (map[string]*mcfgv1.MachineConfig, error) {
	objs, _ := s.Get(resourceOf("MachineConfig"))
	out := map[string]*mcfgv1.MachineConfig{}
	for i := range objs {
		mc, err := typed[mcfgv1.MachineConfig](&objs[i])
		if err != nil {
			return nil, err
		}
		out[mc.Name] = mc
	}
	return out, nil
}

// resourceOf is the snapshot resource of a kind.
func resourceOf(kind string) Resource {
	for _, r := range Resources {
		if r.Kind == kind {
			return r
		}
	}
	panic("no snapshot resource of kind " + kind)
}

// mcoOptions are the simulation's Machine Config Operator: nil when the
// snapshot has no MachineConfigPools (a plain Kubernetes cluster). Its
// configurations render with the machine OS image and release version of
// the configuration the snapshot's nodes run, and its daemons drain,
// write and reboot on the simulation's clock.
func mcoOptions(s *Snapshot, speed float64, reboot time.Duration) (*mco.Options, error) {
	pools, err := snapshotPools(s)
	if err != nil || len(pools) == 0 {
		return nil, err
	}
	configs, err := snapshotConfigs(s)
	if err != nil {
		return nil, err
	}
	o := &mco.Options{Daemon: mco.DaemonOptions{DrainTimeout: mcdDrainTimeout, DrainRetry: mcdDrainRetry,
		ApplyDuration: mcdApplyTime, RebootDuration: reboot, Clock: simclock.Scaled{Speed: speed}}}
	// The worker pool's configuration first: every cluster has one.
	slices.SortStableFunc(pools, func(a, b *mcfgv1.MachineConfigPool) int {
		if (a.Name == "worker") != (b.Name == "worker") {
			if a.Name == "worker" {
				return -1
			}
			return 1
		}
		return 0
	})
	for _, p := range pools {
		if mc := configs[p.Status.Configuration.Name]; mc != nil {
			o.OSImageURL, o.ReleaseVersion = mc.Spec.OSImageURL, mc.Annotations[mco.ReleaseImageVersionAnnotation]
			break
		}
	}
	return o, nil
}

// machineConfigs restores the snapshot's pools and MachineConfigs, waits
// until the simulation's MCO has rendered each pool, and maps the
// configuration each pool targeted in the snapshot to the one rendered
// here: a node that ran it is restored running this one, so that nothing
// rolls until a change asks for it. (The snapshot's MachineConfigs keep
// only digests of their files, and the MCO names a rendered configuration
// by its content: the names differ from the cluster's.)
func (r *restorer) machineConfigs(ctx context.Context) error {
	pools, err := snapshotPools(r.snap)
	if err != nil || len(pools) == 0 {
		return err
	}
	if r.mcfg == nil {
		return errors.New("the snapshot has MachineConfigPools but the simulation runs no Machine Config Operator")
	}
	configs, err := snapshotConfigs(r.snap)
	if err != nil {
		return err
	}
	mcs := r.mcfg.MachineconfigurationV1().MachineConfigs()
	names := make([]string, 0, len(configs))
	for name := range configs {
		names = append(names, name)
	}
	sort.Strings(names)
	err = parallel(ctx, names, func(ctx context.Context, name string) error {
		mc := configs[name]
		mc.ObjectMeta = metav1.ObjectMeta{Name: mc.Name, Labels: mc.Labels, Annotations: mc.Annotations}
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			_, err := mcs.Create(ctx, mc, metav1.CreateOptions{})
			if !apierrors.IsAlreadyExists(err) {
				return err
			}
			// The installer's base configurations exist already.
			old, err := mcs.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			mc.ResourceVersion = old.ResourceVersion
			_, err = mcs.Update(ctx, mc, metav1.UpdateOptions{})
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("MachineConfigs: %w", err)
	}
	for _, p := range pools {
		if err := r.restorePool(ctx, p); err != nil {
			return fmt.Errorf("MachineConfigPool %s: %w", p.Name, err)
		}
	}
	rendered, err := r.waitRendered(ctx, pools)
	if err != nil {
		return err
	}
	r.configName = map[string]string{}
	for _, p := range pools {
		if from := p.Spec.Configuration.Name; from != "" {
			r.configName[from] = rendered[p.Name]
		}
	}
	return nil
}

// restorePool creates the pool, or sets the installer's pool of that
// name to the snapshot's selectors, maxUnavailable and pause.
func (r *restorer) restorePool(ctx context.Context, p *mcfgv1.MachineConfigPool) error {
	pools := r.mcfg.MachineconfigurationV1().MachineConfigPools()
	spec := mcfgv1.MachineConfigPoolSpec{MachineConfigSelector: p.Spec.MachineConfigSelector, NodeSelector: p.Spec.NodeSelector,
		MaxUnavailable: p.Spec.MaxUnavailable, Paused: p.Spec.Paused}
	_, err := pools.Create(ctx, &mcfgv1.MachineConfigPool{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Labels: p.Labels}, Spec: spec}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		old, err := pools.Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		next := old.DeepCopy()
		next.Labels = p.Labels
		spec.Configuration = old.Spec.Configuration
		next.Spec = spec
		_, err = pools.Update(ctx, next, metav1.UpdateOptions{})
		return err
	})
}

// waitRendered waits until every pool targets the rendering of exactly
// the MachineConfigs it now selects, as they are now (the MCO may have
// rendered the installer's base configurations before the snapshot's
// replaced them, and a rendering of the same names is not enough), and
// returns those configurations by pool.
func (r *restorer) waitRendered(ctx context.Context, want []*mcfgv1.MachineConfigPool) (map[string]string, error) {
	out := map[string]string{}
	err := waitfor.Poll(ctx, 100*time.Millisecond, 2*time.Minute, waitfor.Simple(func(ctx context.Context) (bool, string) {
		all, err := r.mcfg.MachineconfigurationV1().MachineConfigs().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var waiting []string
		for _, w := range want {
			p, err := r.mcfg.MachineconfigurationV1().MachineConfigPools().Get(ctx, w.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if why := renderedFrom(p, all.Items, r.osImage, r.extensionsImage); why != "" {
				waiting = append(waiting, why)
				continue
			}
			out[p.Name] = p.Spec.Configuration.Name
		}
		return len(waiting) == 0, strings.Join(waiting, "; ")
	}))
	if err != nil {
		return nil, fmt.Errorf("the snapshot's MachineConfigs did not render: %w", err)
	}
	return out, nil
}

// renderedFrom says why the pool does not yet target the rendering of
// the MachineConfigs it selects, with the machine OS images given ("" when
// it does), with the render's error if it has one.
func renderedFrom(p *mcfgv1.MachineConfigPool, all []mcfgv1.MachineConfig, osImage, extensionsImage string) string {
	sel, err := metav1.LabelSelectorAsSelector(p.Spec.MachineConfigSelector)
	if err != nil {
		return fmt.Sprintf("pool %s: machineConfigSelector: %v", p.Name, err)
	}
	var selected []*mcfgv1.MachineConfig
	for i := range all {
		if mc := &all[i]; !strings.HasPrefix(mc.Name, "rendered-") && sel.Matches(labels.Set(mc.Labels)) {
			selected = append(selected, mc)
		}
	}
	var why string
	if spec, err := mco.Merge(p.Name, selected, osImage, extensionsImage); err != nil {
		why = fmt.Sprintf("pool %s: its MachineConfigs do not render: %v", p.Name, err)
	} else if name, err := mco.RenderedName(p.Name, spec); err != nil {
		why = fmt.Sprintf("pool %s: %v", p.Name, err)
	} else if p.Spec.Configuration.Name == name {
		return ""
	} else {
		why = fmt.Sprintf("pool %s targets %q, not %q, the rendering of the %d MachineConfigs it selects", p.Name, p.Spec.Configuration.Name, name, len(selected))
	}
	for _, c := range p.Status.Conditions {
		if c.Type == mcfgv1.MachineConfigPoolRenderDegraded && c.Status == "True" {
			why += ": " + c.Message
		}
	}
	return why
}

// configAnnotations are the MCO's annotations a restored node boots with:
// the configuration it ran and was told to run, mapped to the
// simulation's rendering, and its daemon's state. A node whose daemon was
// Degraded stays so (the simulated daemon fails again with the same
// reason); a node that was Working carries on.
func (r *restorer) configAnnotations(a map[string]string) map[string]string {
	current, desired := a[mco.CurrentConfigAnnotation], a[mco.DesiredConfigAnnotation]
	if current == "" || r.configName == nil {
		return nil
	}
	mapped := func(name string) string {
		if to, ok := r.configName[name]; ok {
			return to
		}
		return name
	}
	out := map[string]string{mco.CurrentConfigAnnotation: mapped(current), mco.DesiredConfigAnnotation: mapped(first(desired, current)),
		mco.StateAnnotation: mco.StateDone}
	switch a[mco.StateAnnotation] {
	case mco.StateDegraded:
		reason := first(a[mco.ReasonAnnotation], "degraded in the snapshot")
		out[mco.StateAnnotation], out[mco.ReasonAnnotation], out[mco.FailAnnotation] = mco.StateDegraded, reason, reason
	case mco.StateWorking:
		out[mco.StateAnnotation] = mco.StateWorking
	}
	return out
}
