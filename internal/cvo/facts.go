package cvo

import (
	"context"
	"time"

	configclient "github.com/openshift/client-go/config/clientset/versioned"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Platform is the infrastructure type capstan reports: its machines are
// simulated, with no cloud integration OpenShift knows.
const Platform = "None"

// Facts exports the cluster facts update risks are written against, under
// the names OpenShift's monitoring stack gives them:
// cluster_infrastructure_provider{type}, cluster_version{type="current"}
// and kube_node_info{node}.
type Facts struct {
	Client kubernetes.Interface
	Config configclient.Interface
}

var (
	infraDesc   = prometheus.NewDesc("cluster_infrastructure_provider", "Reports whether the cluster is configured with an infrastructure provider. type is unset if no cloud provider is recognized or set to the constant used by the Infrastructure config.", []string{"type", "region"}, nil)
	versionDesc = prometheus.NewDesc("cluster_version", "Reports the version of the cluster in terms of seconds since the epoch. type 'current' is the version being applied.", []string{"type", "version", "image"}, nil)
	nodeDesc    = prometheus.NewDesc("kube_node_info", "Information about a cluster node.", []string{"node"}, nil)
)

// Describe implements prometheus.Collector.
func (f *Facts) Describe(ch chan<- *prometheus.Desc) {
	ch <- infraDesc
	ch <- versionDesc
	ch <- nodeDesc
}

// Collect implements prometheus.Collector.
func (f *Facts) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(infraDesc, prometheus.GaugeValue, 1, Platform, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if f.Config != nil {
		if cv, err := f.Config.ConfigV1().ClusterVersions().Get(ctx, Name, metav1.GetOptions{}); err == nil && cv.Status.Desired.Version != "" {
			var started float64
			if len(cv.Status.History) > 0 {
				started = float64(cv.Status.History[0].StartedTime.Unix())
			}
			ch <- prometheus.MustNewConstMetric(versionDesc, prometheus.GaugeValue, started, "current", cv.Status.Desired.Version, cv.Status.Desired.Image)
		}
	}
	if nodes, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"}); err == nil {
		for _, n := range nodes.Items {
			ch <- prometheus.MustNewConstMetric(nodeDesc, prometheus.GaugeValue, 1, n.Name)
		}
	}
}
