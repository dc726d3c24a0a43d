package cli

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/capstan-dev/capstan/internal/controlplane"
	"github.com/capstan-dev/capstan/internal/etcd"
)

func newEtcdCommand() *cobra.Command {
	c := &cobra.Command{Use: "etcd", Short: "The control plane's etcd: its members, snapshots and restore"}
	c.AddCommand(&cobra.Command{
		Use:   "member --name NAME --data-dir DIR --client-port P --peer-port P --metrics-port P ...",
		Short: "Run one etcd member, as capstan up runs each control-plane machine's",
		Long: `Runs one etcd member in this process until SIGTERM or SIGINT, serving TLS on
127.0.0.1. capstan up starts one such process per control-plane machine and
supervises it, as a machine's kubelet runs etcd's static pod: it prints
"ready" once the member serves. Flags: --name, --data-dir, --client-port,
--peer-port, --metrics-port, --trusted-ca-file (etcd's signer), --cert-file,
--key-file, --peer-cert-file, --peer-key-file, --metrics-ca-file (the metrics
signer), --metrics-cert-file, --metrics-key-file (required);
--initial-cluster and --initial-cluster-state (new or existing) for a member
without data; --log-file; --unsafe-no-fsync (tests only).`,
		DisableFlagParsing: true,
		RunE: func(c *cobra.Command, args []string) error {
			for _, a := range args {
				if a == "-h" || a == "--help" {
					return c.Help()
				}
			}
			if code := etcd.MemberMain(args, c.OutOrStdout(), c.ErrOrStderr()); code != 0 {
				return &exitError{code: code}
			}
			return nil
		},
	})
	c.AddCommand(newEtcdSnapshotCommand(), newEtcdRestoreCommand())
	return c
}

func newEtcdSnapshotCommand() *cobra.Command {
	c := &cobra.Command{Use: "snapshot", Short: "Save and check snapshots of the cluster's etcd"}
	var dataDir string
	save := &cobra.Command{
		Use:   "save FILE",
		Short: "Save a snapshot of the etcd of a running cluster to FILE",
		Long: `Saves a snapshot of the cluster's etcd to FILE, as OpenShift's
cluster-backup.sh does with etcdctl snapshot save: from the leader (or, when
no member has one, from the first member that answers), written beside FILE,
synced, checked and renamed into place. FILE is an etcd v3 snapshot that
etcdutl reads too. The cluster's certificates stay in its data dir; restore
with capstan etcd restore --from FILE.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			st, err := controlplane.SaveEtcdSnapshot(c.Context(), dataDir, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "Snapshot saved at %s (from member %s, etcd %s)\n", args[0], st.Member, st.Version)
			printSnapshotStatus(c.OutOrStdout(), st)
			return nil
		},
	}
	save.Flags().StringVar(&dataDir, "data-dir", defaultDataDir(), "data dir of the running cluster")
	status := &cobra.Command{
		Use:   "status FILE",
		Short: "Check a snapshot and print its hash, revision, keys and size",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			st, err := etcd.CheckSnapshot(args[0])
			if err != nil {
				return err
			}
			printSnapshotStatus(c.OutOrStdout(), st)
			return nil
		},
	}
	c.AddCommand(save, status)
	return c
}

// printSnapshotStatus prints etcdutl snapshot status's columns.
func printSnapshotStatus(out io.Writer, st etcd.SnapshotStatus) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "HASH\tREVISION\tTOTAL KEYS\tTOTAL SIZE")
	fmt.Fprintf(w, "%x\t%d\t%d\t%s\n", st.Hash, st.Revision, st.TotalKeys, humanBytes(st.TotalSize))
	w.Flush()
}

func humanBytes(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "kMGTPE"[exp])
}

func newEtcdRestoreCommand() *cobra.Command {
	var dataDir, from, member string
	var quorum bool
	c := &cobra.Command{
		Use:   "restore (--from FILE | --quorum)",
		Short: "Restore a cluster whose etcd lost its quorum from a snapshot, or from a surviving member",
		Long: `Restores the etcd of a stopped cluster from a snapshot, as OpenShift's
cluster-restore.sh does on its recovery host: every member's data is moved
aside (to DATA_DIR/etcd-backup-TIME), one member (--member, by default the
first control-plane machine's) gets the snapshot's data as a cluster of its
own, its revision moved on by a billion and marked compacted so that no
client takes the restored state for an older one, and the member registry
lists it alone. The next capstan up serves from it, and the etcd operator
adds the other control-plane machines' members one at a time. What was
written after the snapshot is lost; nothing from before it is.

With --quorum, as OpenShift's quorum-restore.sh, no snapshot is needed: a
member that kept its data (--member, by default the first control-plane
machine's with data) becomes a cluster of its own with everything it
committed (etcd's --force-new-cluster), the other members' data is moved
aside, and the operator adds their machines' members again.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			switch {
			case quorum && from != "":
				return errors.New("--from and --quorum: a restore is from a snapshot or from a surviving member, not both")
			case quorum:
				res, err := controlplane.QuorumRestoreEtcd(c.Context(), dataDir, member)
				if err != nil {
					return err
				}
				out := c.OutOrStdout()
				fmt.Fprintf(out, "Made etcd member %s of %s a cluster of its own from its own data\n", res.Member, dataDir)
				fmt.Fprintf(out, "The former data of the other members is in %s\n", res.Aside)
				fmt.Fprintf(out, "Run capstan up --data-dir %s: %s serves alone, and the etcd operator adds the other control-plane machines' members\n", dataDir, res.Member)
				return nil
			case from == "":
				return errors.New("--from: the snapshot to restore is required (capstan etcd snapshot save FILE makes one), or --quorum to restore from a member that kept its data")
			}
			res, err := controlplane.RestoreEtcd(dataDir, from, member)
			if err != nil {
				return err
			}
			out := c.OutOrStdout()
			fmt.Fprintf(out, "Restored etcd member %s of %s from %s: revision %d, moved on by %d and marked compacted\n",
				res.Member, dataDir, from, res.Snapshot.Revision, etcd.RevisionBump)
			fmt.Fprintf(out, "The former data of every member is in %s\n", res.Aside)
			fmt.Fprintf(out, "Run capstan up --data-dir %s: %s serves alone, and the etcd operator adds the other control-plane machines' members\n", dataDir, res.Member)
			return nil
		},
	}
	c.Flags().StringVar(&dataDir, "data-dir", defaultDataDir(), "data dir of the stopped cluster")
	c.Flags().StringVar(&from, "from", "", "the snapshot to restore (capstan etcd snapshot save FILE)")
	c.Flags().StringVar(&member, "member", "", "the member to restore into (default: the first control-plane machine's)")
	c.Flags().BoolVar(&quorum, "quorum", false, "restore from a surviving member's own data instead of a snapshot (quorum-restore.sh)")
	return c
}
