package autoscaler

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Explanation is what the autoscaler would decide on the cluster as it is
// now: the same decision code the loop runs, nothing written.
type Explanation struct {
	// Configured is false when there is no ClusterAutoscaler: the
	// autoscaler does nothing then.
	Configured bool
	Config     *Config
	Groups     []*NodeGroup
	Bad        []BadGroup
	ScaleUp    *ScaleUpPlan
	// ScaleDown is nil when scale-down is disabled.
	ScaleDown *ScaleDownPlan
}

// Explain reads the cluster and runs the autoscaler's decisions on it.
// Backoffs of failed scale-ups live in the running autoscaler and are not
// seen here.
func Explain(ctx context.Context, cfg *rest.Config, client kubernetes.Interface, opts Options) (*Explanation, error) {
	a, err := New(cfg, client, opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		a.shutdownInformers()
	}()
	// Without a ClusterAutoscaler there is nothing to explain: asked
	// first, so that nothing else of the cluster is read.
	ca, err := a.clusterAutoscaler(ctx)
	if err != nil {
		return nil, err
	}
	if ca == nil {
		return &Explanation{}, nil
	}
	a.factory.Start(ctx.Done())
	a.mfactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), a.synced...) {
		return nil, fmt.Errorf("reading the cluster: %w", ctx.Err())
	}
	c, err := ConfigFrom(ca)
	if err != nil {
		return nil, fmt.Errorf("ClusterAutoscaler %s: %w", ca.Name, err)
	}
	st, err := a.readState(&c)
	if err != nil {
		return nil, err
	}
	e := &Explanation{Configured: true, Config: &c, Groups: st.groups, Bad: st.bad}
	if e.ScaleUp, err = a.planScaleUp(ctx, st); err != nil {
		return nil, err
	}
	if c.ScaleDownEnabled {
		cm, err := client.CoreV1().ConfigMaps(opts.Namespace).Get(ctx, StatusConfigMap, metav1.GetOptions{})
		if err != nil {
			cm = nil
		}
		if e.ScaleDown, err = a.planScaleDown(st, cm, e.ScaleUp); err != nil {
			return nil, err
		}
	}
	return e, nil
}
