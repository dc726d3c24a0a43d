package cli

import (
	"github.com/spf13/cobra"

	"github.com/capstan-dev/capstan/internal/etcd"
)

func newEtcdCommand() *cobra.Command {
	c := &cobra.Command{Use: "etcd", Short: "The control plane's etcd members"}
	c.AddCommand(&cobra.Command{
		Use:   "member --name NAME --data-dir DIR --client-port P --peer-port P --trusted-ca-file F --cert-file F --key-file F",
		Short: "Run one etcd member, as capstan up runs each control-plane machine's",
		Long: `Runs one etcd member in this process until SIGTERM or SIGINT, serving TLS on
127.0.0.1. capstan up starts one such process per control-plane machine and
supervises it, as a machine's kubelet runs etcd's static pod: it prints
"ready" once the member serves. Flags: --name, --data-dir, --client-port,
--peer-port, --trusted-ca-file, --cert-file, --key-file (required);
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
	return c
}
