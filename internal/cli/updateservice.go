package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/capstan-dev/capstan/internal/component"
	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/leader"
	"github.com/capstan-dev/capstan/internal/updateservice"
)

func newUpdateServiceCommand() *cobra.Command {
	var (
		graphData, releases, listen string
		refresh                     time.Duration
		recordEvents                bool
		rf                          runFlags
		cf                          clientFlags
	)
	c := &cobra.Command{
		Use:   "update-service --graph-data DIR --releases REPO",
		Short: "Serve an update graph, as the OpenShift Update Service (Cincinnati) does",
		Long: `Serves the Cincinnati graph API (GET /api/upgrades_info/v1/graph?channel=C&arch=A,
also /graph and /v1/graph) built from the release images of REPO (a registry
repository, or oci:DIR), whose release-metadata previous and next give the
edges, and from DIR in the layout of openshift/cincinnati-graph-data:
channels/*.yaml (name, versions) and blocked-edges/*.yaml (to, from, and for
a conditional edge url, name, message and matchingRules). A malformed file
is refused at start with its file and line; a reload that fails keeps the
graph served before. Every replica serves: there is no lease.

An image of REPO that is not a release is left out of the graph and
printed; with --record-events it is also a warning event (reason
ReleaseImageSkipped) on the cluster's ClusterVersion, recorded with the
credentials of --kubeconfig (in a pod, its ServiceAccount's).`,
		Example: `  capstan update-service --graph-data ./graph-data --releases localhost:5000/ocp/release
  curl -H 'Accept: application/json' 'http://127.0.0.1:8090/api/upgrades_info/v1/graph?channel=fast-4.11'`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if graphData == "" || releases == "" {
				return errors.New("--graph-data and --releases are required")
			}
			if refresh <= 0 {
				return fmt.Errorf("--refresh must be positive, got %s", refresh)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			svc, err := updateservice.New(ctx, releases, graphData)
			if err != nil {
				return err
			}
			out := c.OutOrStdout()
			if recordEvents {
				kube, _, err := cf.client()
				if err != nil {
					return fmt.Errorf("--record-events: %w", err)
				}
				svc.RecordSkips(ctx, kube, cvo.ClusterVersionRef)
			} else {
				svc.OnSkip(func(msg string) { fmt.Fprintf(out, "Left out of the graph: %s\n", msg) })
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen %s: %w", listen, err)
			}
			fmt.Fprintf(out, "Serving the update graph at http://%s/api/upgrades_info/v1/graph\n", ln.Addr())
			return rf.run(c, "update-service", nil, leader.Config{}, nil, func(ctx context.Context) error {
				go svc.Run(ctx, refresh)
				return component.Serve(ctx, &http.Server{Handler: svc, ReadHeaderTimeout: 10 * time.Second}, ln)
			})
		},
	}
	c.Flags().StringVar(&graphData, "graph-data", "", "graph-data directory (channels/, blocked-edges/)")
	c.Flags().StringVar(&releases, "releases", "", "repository of the release images (registry repository or oci:DIR)")
	c.Flags().StringVar(&listen, "listen", "127.0.0.1:8090", "address to serve the graph API on")
	c.Flags().DurationVar(&refresh, "refresh", 5*time.Minute, "how often the releases and the graph data are read again")
	c.Flags().BoolVar(&recordEvents, "record-events", false, "record an event on the ClusterVersion for each image left out of the graph")
	cf.addComponent(c.Flags())
	rf.addHealth(c.Flags(), "")
	return c
}
