package cli

import (
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/capstan-dev/capstan/internal/bench"
)

func newBenchEtcdCommand() *cobra.Command {
	o := bench.EtcdOptions{Members: 3, Kills: 20, Rest: 10 * time.Second, Timeout: 2 * time.Minute}
	c := &cobra.Command{
		Use:   "etcd",
		Short: "etcd's members as processes: memory and CPU at rest, and the write outage when the leader's process is SIGKILLed",
		Long: `Forms a cluster of --members etcd member processes (the bootstrap member hands
over to them, as in capstan up), samples their memory and CPU for --rest,
then SIGKILLs the leader's process --kills times. For each kill it reports
how long after the SIGKILL a write through the proxy kube-apiserver uses
first succeeded (a leader election and the client's reconnection), and when
the killed member was healthy again (restarted by its supervisor).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(c.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			out := c.OutOrStdout()
			res, err := bench.Etcd(ctx, o, out)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "\nbench etcd: members=%d kills=%d fsync=%v\n", res.Members, len(res.Outages), !o.NoFsync)
			fmt.Fprintf(out, "  formed:             %.1f s\n", res.Formed.Seconds())
			fmt.Fprintf(out, "  members' memory:    %s RSS, %s PSS at rest\n", bench.MiB(res.RSSBytes), bench.MiB(res.PSSBytes))
			fmt.Fprintf(out, "  members' CPU:       %.3f cores at rest\n", res.CPUAtRest)
			if len(res.Outages) > 0 {
				ms := func(d time.Duration) int64 { return d.Milliseconds() }
				fmt.Fprintf(out, "  write outage:       p50 %d ms, p99 %d ms, max %d ms\n",
					ms(bench.Quantile(res.Outages, 0.5)), ms(bench.Quantile(res.Outages, 0.99)), ms(bench.Quantile(res.Outages, 1)))
				fmt.Fprintf(out, "  member back:        p50 %.1f s, max %.1f s\n",
					bench.Quantile(res.Restarts, 0.5).Seconds(), bench.Quantile(res.Restarts, 1).Seconds())
			}
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&o.Members, "members", o.Members, "etcd members (processes)")
	f.IntVar(&o.Kills, "kills", o.Kills, "SIGKILLs of the leader's process")
	f.DurationVar(&o.Rest, "rest", o.Rest, "how long to sample memory and CPU at rest")
	f.BoolVar(&o.NoFsync, "etcd-unsafe-no-fsync", false, "run etcd without fsync")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up on each step after this long")
	return c
}
