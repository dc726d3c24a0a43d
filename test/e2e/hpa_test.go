package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"github.com/capstan-dev/capstan/internal/resourcemetrics"
	"github.com/capstan-dev/capstan/internal/sim"
	"github.com/capstan-dev/capstan/internal/testenv"
)

// The chapter's HorizontalPodAutoscaler story, for real: the upstream HPA
// controller reads the resource metrics API capstan serves over the
// simulated kubelets. Load up: the HPA adds replicas, their pods do not
// fit, the cluster autoscaler adds nodes. Load down: the HPA removes
// replicas, the nodes left empty go after unneededTime.
func TestHPADrivesTheClusterAutoscaler(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "hpa")
	kubectl := func(args ...string) string {
		t.Helper()
		return capstanOK(t, append([]string{"kubectl", "--kubeconfig", env.Kubeconfig, "-n", ns}, args...)...)
	}
	const set = "as-hpa"
	autoscaledMachineSet(t, set, 1, 3)
	createClusterAutoscaler(t, testSpeedClusterAutoscaler)
	// One 3-core pod per 4-core node: every replica past the first needs
	// a node of its own.
	deployment(t, ns, "busy", set, "3", 1)
	kubectl("annotate", "deployment", "busy", sim.LoadAnnotation+"=cpu=300m,memory=64Mi")
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		n := runningPods(t, ns, "busy")
		return n == 1, fmt.Sprintf("%d of 1 pods running", n)
	})
	waitReplicas(t, set, 1)

	// The metrics API is registered and serves what the kubelets measure.
	apisvc := capstanOK(t, "kubectl", "--kubeconfig", env.Kubeconfig, "get", "apiservice", resourcemetrics.APIService)
	if !strings.Contains(apisvc, resourcemetrics.Namespace+"/"+resourcemetrics.ServiceName) || !strings.Contains(apisvc, "True") {
		t.Fatalf("APIService %s not available:\n%s", resourcemetrics.APIService, apisvc)
	}
	metrics, err := metricsclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		out, err := capstan(t, "kubectl", "--kubeconfig", env.Kubeconfig, "-n", ns, "top", "pod")
		return err == nil && strings.Contains(out, "busy-") && strings.Contains(out, "300m") && strings.Contains(out, "64Mi"), "kubectl top pod: " + out
	})
	pm, err := metrics.MetricsV1beta1().PodMetricses(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=busy"})
	if err != nil || len(pm.Items) != 1 {
		t.Fatalf("pod metrics of app=busy: %v %v", pm, err)
	}
	if cpu := pm.Items[0].Containers[0].Usage.Cpu().MilliValue(); cpu != 300 {
		t.Errorf("pod metrics report %dm cpu, want the 300m load", cpu)
	}
	top := kubectl("top", "node", "-l", "autoscale-e2e="+set)
	if !strings.Contains(top, "300m") {
		t.Errorf("kubectl top node does not show the node's 300m:\n%s", top)
	}

	// Load up: 6 cores for one 3-core pod is 200% of its request.
	kubectl("autoscale", "deployment", "busy", "--cpu=50%", "--min=1", "--max=3")
	kubectl("annotate", "--overwrite", "deployment", "busy", sim.LoadAnnotation+"=cpu=6,memory=64Mi")
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		n := runningPods(t, ns, "busy")
		return n == 3, fmt.Sprintf("%d of 3 pods running; hpa %s", n, hpaStatus(t, ns, "busy"))
	})
	waitReplicas(t, set, 3)
	rescaled := eventMessage(t, ns, "busy", "SuccessfulRescale", "New size: ")
	if !strings.Contains(rescaled, "cpu resource utilization (percentage of request) above target") {
		t.Errorf("HPA rescale event %q does not give the cpu utilization as its reason", rescaled)
	}
	eventMessage(t, ns, "", "TriggeredScaleUp", "pod triggered scale-up")

	// Load down: 300m over three pods is 3% of their requests.
	kubectl("annotate", "--overwrite", "deployment", "busy", sim.LoadAnnotation+"=cpu=300m,memory=64Mi")
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		n := runningPods(t, ns, "busy")
		return n == 1, fmt.Sprintf("%d pods running, want 1; hpa %s", n, hpaStatus(t, ns, "busy"))
	})
	waitReplicas(t, set, 1)
}

func hpaStatus(t *testing.T, ns, name string) string {
	hpa, err := env.Client.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	var conds []string
	for _, c := range hpa.Status.Conditions {
		if c.Status != "True" || c.Type == autoscalingv2.ScalingLimited {
			conds = append(conds, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
		}
	}
	return fmt.Sprintf("current %d desired %d; %s", hpa.Status.CurrentReplicas, hpa.Status.DesiredReplicas, strings.Join(conds, "; "))
}
