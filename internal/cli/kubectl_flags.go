package cli

import (
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
)

// kubectlQPS and kubectlBurst are the embedded kubectl's client-side rate
// limits for every request, the figures upstream kubectl already gives its
// discovery client. client-go's defaults (5 a second, bursts of 10) made
// `get pods -A` on 30,000 pods wait 10 of its 15 s between pages of 500: the
// API server's priority and fairness, not the client, is what protects it.
const (
	kubectlQPS   = 50
	kubectlBurst = 300
)

func defaultConfigFlags() *genericclioptions.ConfigFlags {
	return genericclioptions.NewConfigFlags(true).WithDeprecatedPasswordFlag().
		WithDiscoveryBurst(kubectlBurst).WithDiscoveryQPS(kubectlQPS).
		WithWrapConfigFn(raiseClientRateLimits)
}

// raiseClientRateLimits lifts client-go's default limits on a config that
// sets none, keeping whatever a caller chose.
func raiseClientRateLimits(c *rest.Config) *rest.Config {
	if c.QPS == 0 && c.RateLimiter == nil {
		c.QPS = kubectlQPS
	}
	if c.Burst == 0 {
		c.Burst = kubectlBurst
	}
	return c
}
