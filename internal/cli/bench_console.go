package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/capstan-dev/capstan/internal/bench"
	"github.com/capstan-dev/capstan/internal/browser"
)

func newBenchConsoleCommand() *cobra.Command {
	o := bench.ConsoleOptions{Nodes: 5000, Parallelism: 64, Churn: 17, Edits: 5, Images: 50, Timeout: 10 * time.Minute}
	c := &cobra.Command{
		Use:   "console",
		Short: "The web console over N nodes in a headless Chromium: the Nodes page's time to show them, an edit's time to show, the page's main thread under churn, and its memory",
		Long: `Starts a control plane and its console, launches N simulated nodes, and
drives Debian's Chromium (` + browser.PathEnv + ` names another) through the console's
Overview and Nodes pages, timing what a person waits for.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			res, err := bench.Console(ctx, o, c.OutOrStdout())
			if err != nil {
				return err
			}
			ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000) }
			out := c.OutOrStdout()
			fmt.Fprintf(out, "\nbench console: nodes=%d (%s of JSON a node) fsync=%v\n", res.Nodes, kib(res.NodeJSON), !o.EtcdNoFsync)
			fmt.Fprintf(out, "  Nodes page, first rows:       %s\n", ms(res.NodesFirstRows))
			fmt.Fprintf(out, "  Nodes page, all %d counted: %s\n", res.Nodes, ms(res.NodesAll))
			fmt.Fprintf(out, "  rows drawn:                   %d of %d\n", res.Drawn, res.Nodes)
			fmt.Fprintf(out, "  scrolled to the last node:    %s\n", ms(res.ScrolledToEnd))
			fmt.Fprintf(out, "  filtered to one node:         %s\n", ms(res.Filtered))
			fmt.Fprintf(out, "  an edit shown:                %s median, %s max (%d edits, PATCH to row)\n",
				ms(bench.Quantile(res.EditShown, 0.5)), ms(bench.Quantile(res.EditShown, 1)), len(res.EditShown))
			fmt.Fprintf(out, "  main thread busy:             %.0f%% at %.0f node updates/s\n", 100*res.Busy, o.Churn)
			fmt.Fprintf(out, "  Nodes page memory:            %s JS heap, %d DOM nodes\n", bench.MiB(res.NodesHeap), res.NodesDOM)
			fmt.Fprintf(out, "  Overview, nodes counted:      %s; every node's readiness read: %s; %s JS heap\n", ms(res.OverviewShown), ms(res.OverviewRead), bench.MiB(res.OverviewHeap))
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&o.Nodes, "nodes", o.Nodes, "simulated nodes")
	f.IntVar(&o.Parallelism, "parallelism", o.Parallelism, "instances launched at once")
	f.Float64Var(&o.Churn, "churn", o.Churn, "node updates a second while the main thread is measured (5,000 kubelets posting their status every 5 minutes make 17)")
	f.IntVar(&o.Images, "images", o.Images, "images listed in each node's status, as a kubelet lists them (at most 50 by default)")
	f.IntVar(&o.Edits, "edits", o.Edits, "single edits timed from the PATCH to the row that shows it")
	f.StringVar(&o.Chromium, "chromium", "", "the Chromium to drive (default: $"+browser.PathEnv+", else chromium on the PATH)")
	f.BoolVar(&o.EtcdNoFsync, "etcd-unsafe-no-fsync", false, "run etcd without fsync")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up on each step after this long")
	return c
}

func kib(b int) string { return fmt.Sprintf("%.1f KiB", float64(b)/1024) }
