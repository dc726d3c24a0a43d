package cli

import (
	"fmt"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/capstan-dev/capstan/deploy"
)

func newAdmAuditCommand() *cobra.Command {
	c := &cobra.Command{Use: "audit", Short: "Read the API server's audit log"}
	c.AddCommand(newAdmAuditUnusedRightsCommand())
	return c
}

func newAdmAuditUnusedRightsCommand() *cobra.Command {
	var dataDir, auditLog string
	c := &cobra.Command{
		Use:   "unused-rights [COMPONENT...]",
		Short: "List the rights of capstan's components that no request of theirs in the audit log used",
		Long: `Lists each right that deploy/COMPONENT/rbac.yaml grants a component (every
component when none is named) and that no request of the component's
ServiceAccount used, as the API server's audit log (and its rotated
backups) records them: a request the authorizer allowed, of the same verb,
group, resource and subresource, on the name the right is limited to,
inside the namespace its binding applies in. A right none of a run's
requests used is a candidate to drop: run the component through what it
does (capstan up, a test run), then ask.`,
		RunE: func(c *cobra.Command, args []string) error {
			if auditLog == "" {
				auditLog = filepath.Join(dataDir, "logs", "audit.log")
			}
			unused, total, err := deploy.Unused(auditLog, args...)
			if err != nil {
				return err
			}
			out := c.OutOrStdout()
			byComponent := map[string]int{}
			for _, r := range unused {
				byComponent[r.Component]++
			}
			w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "COMPONENT\tROLE\tRIGHT\tWHERE")
			for _, r := range unused {
				fmt.Fprintln(w, r.String())
			}
			if err := w.Flush(); err != nil {
				return err
			}
			names := args
			if len(names) == 0 {
				names = deploy.Components()
			}
			for _, name := range names {
				fmt.Fprintf(out, "%s: %d of %d rights unused\n", name, byComponent[name], total[name])
			}
			return nil
		},
	}
	c.Flags().StringVar(&dataDir, "data-dir", defaultDataDir(), "data dir of the capstan cluster whose audit log to read")
	c.Flags().StringVar(&auditLog, "audit-log", "", "audit log to read (default: DATA_DIR/logs/audit.log)")
	return c
}
