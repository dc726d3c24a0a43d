package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/sim"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

// EtcdState is how far etcd is from tolerating the loss of a master.
type EtcdState struct {
	// FaultTolerant: the bootstrap member is gone and the desired number
	// of voting members are healthy (but those of machines an injected
	// fault stopped, which the summary names).
	FaultTolerant bool
	// Desired is the control plane's size; Healthy how many voting
	// members are healthy.
	Desired, Healthy int
	// Waiting says what it waits for, while it is not fault-tolerant.
	Waiting string
	// Stopped names the members whose machines are stopped by an
	// injected fault.
	Stopped []string
}

// EtcdState reads etcd's membership and health (from etcd itself, which
// needs no API) and the control-plane machines.
func (c *Cluster) EtcdState(ctx context.Context) (EtcdState, error) {
	e := c.ControlPlane.Etcd()
	desired, err := c.desiredControlPlane(ctx)
	if err != nil {
		return EtcdState{}, err
	}
	st := EtcdState{Desired: desired}
	members, err := e.Members(ctx)
	if err != nil {
		return st, fmt.Errorf("listing the etcd members: %w", err)
	}
	stopped, err := c.stoppedMasters(ctx)
	if err != nil {
		return st, err
	}
	var waits, learners, unhealthy []string
	voting := 0
	for _, m := range members {
		switch {
		case m.Name == etcd.BootstrapName:
			waits = append(waits, "the bootstrap member to leave")
		case !m.Started || m.Learner:
			learners = append(learners, cmpName(m))
		case m.Healthy:
			voting++
			st.Healthy++
		case stopped[m.Name]:
			voting++
			st.Stopped = append(st.Stopped, m.Name)
		default:
			voting++
			unhealthy = append(unhealthy, m.Name)
		}
	}
	if voting < desired {
		waits = append(waits, fmt.Sprintf("%d of %d voting members", voting, desired))
	}
	if len(learners) > 0 {
		waits = append(waits, strings.Join(learners, ", ")+" to catch up and vote")
	}
	if len(unhealthy) > 0 {
		waits = append(waits, strings.Join(unhealthy, ", ")+" to be healthy")
	}
	st.FaultTolerant = len(waits) == 0
	st.Waiting = strings.Join(waits, "; ")
	return st, nil
}

func cmpName(m etcd.MemberStatus) string {
	if m.Name != "" {
		return m.Name
	}
	return fmt.Sprintf("member %x", m.ID)
}

// desiredControlPlane is the control plane's size: the
// ControlPlaneMachineSet's replicas, or the size it was installed with.
func (c *Cluster) desiredControlPlane(ctx context.Context) (int, error) {
	if c.opts.MachineAPI == nil {
		return c.opts.ControlPlaneNodes, nil
	}
	mc, err := c.MachineClient()
	if err != nil {
		return 0, err
	}
	cpms, err := mc.MachineV1().ControlPlaneMachineSets(c.opts.MachineAPI.Namespace).Get(ctx, machine.ControlPlaneMachineSetName, metav1.GetOptions{})
	switch {
	case err == nil && cpms.Spec.Replicas != nil:
		return int(*cpms.Spec.Replicas), nil
	case err != nil && !apierrors.IsNotFound(err):
		return 0, fmt.Errorf("reading the ControlPlaneMachineSet: %w", err)
	}
	return c.opts.ControlPlaneNodes, nil
}

// stoppedMasters names the control-plane machines whose nodes an
// injected fault stopped.
func (c *Cluster) stoppedMasters(ctx context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	if c.opts.MachineAPI == nil {
		return out, nil
	}
	mc, err := c.MachineClient()
	if err != nil {
		return nil, err
	}
	list, err := mc.MachineV1beta1().Machines(c.opts.MachineAPI.Namespace).List(ctx, metav1.ListOptions{LabelSelector: machine.MachineRoleLabel + "=master"})
	if err != nil {
		return nil, fmt.Errorf("listing the control-plane machines: %w", err)
	}
	for _, m := range list.Items {
		if m.Status.NodeRef == nil {
			continue
		}
		n, err := c.Client.CoreV1().Nodes().Get(ctx, m.Status.NodeRef.Name, metav1.GetOptions{})
		if err == nil && sim.Stopped(n) {
			out[m.Name] = true
		}
	}
	return out, nil
}

// WaitEtcdFaultTolerant waits until etcd tolerates the loss of a master:
// the bootstrap member gone and the desired number of voting members
// healthy. Each time what it waits for changes, it says so through
// progress. Without the etcd operator the bootstrap member serves alone
// and nothing is waited for. A timeout of 0 waits until ctx ends.
func (c *Cluster) WaitEtcdFaultTolerant(ctx context.Context, timeout time.Duration, progress func(string)) (EtcdState, error) {
	if timeout <= 0 {
		timeout = math.MaxInt64
	}
	switch {
	case !c.opts.EtcdOperator || c.ControlPlane.Etcd() == nil:
		return EtcdState{Desired: 1, Healthy: 1, Waiting: "the bootstrap member serves alone (no etcd operator)"}, nil
	case c.opts.ControlPlaneNodes == 0:
		return EtcdState{Desired: 1, Healthy: 1, Waiting: "the bootstrap member serves alone (no control-plane machine)"}, nil
	}
	var last EtcdState
	said := ""
	err := waitfor.Poll(ctx, 500*time.Millisecond, timeout, func(ctx context.Context) (bool, string, error) {
		st, err := c.EtcdState(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		last = st
		if !st.FaultTolerant && st.Waiting != said {
			said = st.Waiting
			progress(st.Waiting)
		}
		return st.FaultTolerant, st.Waiting, nil
	})
	if err != nil {
		return last, fmt.Errorf("etcd is not fault-tolerant: %w", err)
	}
	sort.Strings(last.Stopped)
	last.Stopped = slices.Compact(last.Stopped)
	return last, nil
}

// etcdProber answers the readiness probes of the etcd quorum guard's pods
// for real: a probe of a master's port etcd.ReadyzPort reaches the /readyz
// of the etcd member running on that machine (machines, their instances
// and their nodes share a name), as a kubelet's probe of the host's port
// would. Any other probe is not the simulation's to run.
func etcdProber(e *etcd.Cluster) sim.Prober {
	client := &http.Client{Transport: &http.Transport{
		// A kubelet's HTTPS probe does not check the certificate.
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as the kubelet's prober
		DisableKeepAlives: true,
	}}
	return func(ctx context.Context, node string, p *corev1.Probe) (bool, bool) {
		g := p.HTTPGet
		if g == nil || g.Port.IntValue() != etcd.ReadyzPort {
			return false, false
		}
		url, ok := e.ReadyzURL(node)
		if !ok {
			return false, true
		}
		timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
		ctx, cancel := context.WithTimeout(ctx, min(timeout, 2*time.Second))
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, true
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, true
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode >= 200 && resp.StatusCode < 400, true
	}
}
