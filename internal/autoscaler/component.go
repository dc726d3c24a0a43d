package autoscaler

import (
	"context"
	"errors"
	"fmt"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	autoscalingv1 "github.com/capstan-dev/capstan/internal/autoscaler/apis/v1"
	autoscalingv1beta1 "github.com/capstan-dev/capstan/internal/autoscaler/apis/v1beta1"
	"github.com/capstan-dev/capstan/internal/machine"
)

// LeaderElectionID is the Lease the autoscaler holds, as upstream's.
const LeaderElectionID = "cluster-autoscaler"

// Scheme knows the built-in, machine.openshift.io and
// autoscaling.openshift.io types.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = machinev1.Install(s)
	_ = autoscalingv1.AddToScheme(s)
	_ = autoscalingv1beta1.AddToScheme(s)
	return s
}

// NewComponent sets up the autoscaler and the MachineAutoscaler controller
// and returns what runs them both until ctx ends (or one fails).
func NewComponent(cfg *rest.Config, kube kubernetes.Interface, opts Options) (func(context.Context) error, error) {
	a, err := New(cfg, kube, opts)
	if err != nil {
		return nil, err
	}
	machine.SetControllerLogger()
	mgr, err := manager.New(cfg, manager.Options{
		Scheme:  Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"},
		// One process may run a cluster after another (a simulation
		// and its control run): names are unique within each manager,
		// not across the process's life, which the global check wants.
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: map[client.Object]cache.ByObject{
			&machinev1.MachineSet{}:                 {Namespaces: map[string]cache.Config{opts.Namespace: {}}},
			&autoscalingv1beta1.MachineAutoscaler{}: {Namespaces: map[string]cache.Config{opts.Namespace: {}}},
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("MachineAutoscaler controller: %w", err)
	}
	if err := addMachineAutoscalerController(mgr); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		errs := make(chan error, 2)
		go func() { errs <- a.Run(ctx) }()
		go func() { errs <- mgr.Start(ctx) }()
		first := <-errs
		cancel()
		second := <-errs
		return errors.Join(first, second)
	}, nil
}
