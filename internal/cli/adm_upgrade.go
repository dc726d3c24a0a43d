package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	configclient "github.com/openshift/client-go/config/clientset/versioned"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/capstan-dev/capstan/internal/cvo"
)

// ocError prints an error as oc does (error: MESSAGE, on stderr) and
// exits 1.
func ocError(w io.Writer, err error) error {
	msg := err.Error()
	if !strings.HasSuffix(msg, "\n") {
		msg += "\n"
	}
	fmt.Fprint(w, "error: "+msg)
	return &exitError{code: 1}
}

func configClient(cf *clientFlags) (configclient.Interface, error) {
	cfg, err := cf.restConfig()
	if err != nil {
		return nil, err
	}
	return configclient.NewForConfig(cfg)
}

func newAdmUpgradeCommand() *cobra.Command {
	var (
		cf                    clientFlags
		req                   cvo.Request
		clear, includeNotRecd bool
	)
	c := &cobra.Command{
		Use:   "upgrade [--to VERSION | --to-image IMAGE | --to-latest | --clear]",
		Short: "Show the cluster's updates, or request one, as oc adm upgrade does",
		Long: `With no flags, shows the cluster's version, channel and the updates the update
service recommends (--include-not-recommended: also those with known risks,
with their reasons). --to, --to-image or --to-latest request an update by
writing ClusterVersion spec.desiredUpdate; --clear cancels a request.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			out, errOut := c.OutOrStdout(), c.ErrOrStderr()
			if clear && (req.To != "" || req.ToImage != "" || req.ToLatest) {
				return ocError(errOut, errors.New("--clear may not be specified with any other flags"))
			}
			warnings, err := cvo.ValidateRequest(req)
			if err != nil {
				return ocError(errOut, err)
			}
			for _, w := range warnings {
				fmt.Fprintln(errOut, w)
			}
			client, err := configClient(&cf)
			if err != nil {
				return err
			}
			ctx := c.Context()
			cvs := client.ConfigV1().ClusterVersions()
			cv, err := cvs.Get(ctx, cvo.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return ocError(errOut, errors.New("No cluster version information available - you must be connected to an OpenShift version 4 server to fetch the current version"))
			}
			if err != nil {
				return ocError(errOut, err)
			}
			patch := func(u *configv1.Update) (*configv1.ClusterVersion, error) {
				raw, err := json.Marshal(u)
				if err != nil {
					return nil, err
				}
				return cvs.Patch(ctx, cvo.Name, types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"desiredUpdate":%s}}`, raw)), metav1.PatchOptions{})
			}
			switch {
			case clear:
				ok, replacement, info := cvo.Clear(cv)
				if !ok {
					fmt.Fprintln(out, info)
					return nil
				}
				original := *cv.Spec.DesiredUpdate
				updated, err := patch(replacement)
				if err != nil {
					return ocError(errOut, fmt.Errorf("Unable to cancel current rollout: %v", err))
				}
				fmt.Fprintln(out, cvo.Cleared(original, updated.Status.Desired))
			case req.To != "" || req.ToImage != "" || req.ToLatest:
				d, err := cvo.Decide(cv, req)
				if err != nil {
					return ocError(errOut, err)
				}
				for _, w := range d.Warnings {
					fmt.Fprintln(errOut, w)
				}
				if d.Update == nil {
					fmt.Fprintln(out, d.Info)
					return nil
				}
				if _, err := patch(d.Update); err != nil {
					return ocError(errOut, fmt.Errorf("Unable to upgrade: %v", err))
				}
				if d.Update.Version != "" {
					fmt.Fprintf(out, "Requested update to %s\n", d.Update.Version)
				} else {
					fmt.Fprintf(out, "Requested update to release image %s\n", d.Update.Image)
				}
			default:
				cvo.Describe(out, errOut, cv, includeNotRecd)
			}
			return nil
		},
	}
	cf.add(c.Flags())
	fs := c.Flags()
	fs.StringVar(&req.To, "to", "", "Specify the version to upgrade to. The version must be on the list of available updates.")
	fs.StringVar(&req.ToImage, "to-image", "", "Provide a release image to upgrade to.")
	fs.BoolVar(&req.ToLatest, "to-latest", false, "Use the latest (highest Semantic Version) available version.")
	fs.BoolVar(&clear, "clear", false, "If an upgrade has been requested but not yet downloaded, cancel the update. This has no effect once the update has started.")
	fs.BoolVar(&req.Force, "force", false, "Upgrade regardless of cluster-side guard failures, such as release verification or upgradeable conditions.")
	fs.BoolVar(&req.AllowExplicit, "allow-explicit-upgrade", false, "Upgrade even if the upgrade target is not listed in the available versions list.")
	fs.BoolVar(&req.AllowWithWarnings, "allow-upgrade-with-warnings", false, "Upgrade regardless of client-side guard failures, such as upgrades in progress or failing clusters.")
	fs.BoolVar(&includeNotRecd, "include-not-recommended", false, "Display additional updates which are not recommended based on your cluster configuration.")
	fs.BoolVar(&req.AllowNotRecommended, "allow-not-recommended", false, "Allows upgrade to a version when it is supported but not recommended for updates.")
	c.AddCommand(newAdmUpgradeChannelCommand(), newAdmUpgradeStatusCommand())
	return c
}

func newAdmUpgradeStatusCommand() *cobra.Command {
	var (
		cf      clientFlags
		details string
	)
	c := &cobra.Command{
		Use:   "status",
		Short: "Show the progress of an update, as oc adm upgrade status does",
		Long: `Shows how far the control plane's update has come: the assessment, the target,
the operators updated, updating and waiting, how long it has taken, the
operators' health, and what needs attention.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			out, errOut := c.OutOrStdout(), c.ErrOrStderr()
			client, err := configClient(&cf)
			if err != nil {
				return err
			}
			cv, err := client.ConfigV1().ClusterVersions().Get(c.Context(), cvo.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return ocError(errOut, errors.New("no cluster version information available - you must be connected to an OpenShift version 4 server to fetch the current version"))
			}
			if err != nil {
				return ocError(errOut, err)
			}
			cos, err := client.ConfigV1().ClusterOperators().List(c.Context(), metav1.ListOptions{})
			if err != nil {
				return ocError(errOut, err)
			}
			kube, cfg, err := cf.client()
			if err != nil {
				return ocError(errOut, err)
			}
			machines, err := cvo.ReadMachines(c.Context(), kube, cfg)
			if err != nil {
				return ocError(errOut, err)
			}
			alerts := func() ([]cvo.StatusAlert, error) { return clusterAlerts(c.Context(), cfg) }
			if err := cvo.UpgradeStatus(out, cv, cos.Items, machines, alerts, time.Now(), details); err != nil {
				return ocError(errOut, err)
			}
			return nil
		},
	}
	cf.add(c.Flags())
	c.Flags().StringVar(&details, "details", "none", "Show detailed output in selected section. One of: "+strings.Join(cvo.StatusDetails, ", "))
	return c
}

func newAdmUpgradeChannelCommand() *cobra.Command {
	var (
		cf            clientFlags
		allowExplicit bool
	)
	c := &cobra.Command{
		Use:   "channel [CHANNEL]",
		Short: "Set or clear the update channel, as oc adm upgrade channel does",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			out, errOut := c.OutOrStdout(), c.ErrOrStderr()
			channel := ""
			if len(args) == 1 {
				channel = args[0]
			}
			client, err := configClient(&cf)
			if err != nil {
				return err
			}
			cvs := client.ConfigV1().ClusterVersions()
			cv, err := cvs.Get(c.Context(), cvo.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return ocError(errOut, errors.New("no cluster version information available - you must be connected to an OpenShift version 4 server to fetch the current version"))
			}
			if err != nil {
				return ocError(errOut, err)
			}
			write, info, warnings, err := cvo.Channel(cv, channel, allowExplicit)
			if err != nil {
				return ocError(errOut, err)
			}
			if info != "" {
				fmt.Fprintln(out, info)
			}
			for _, w := range warnings {
				fmt.Fprintln(errOut, w)
			}
			if !write {
				return nil
			}
			cv.Spec.Channel = channel
			if _, err := cvs.Update(c.Context(), cv, metav1.UpdateOptions{}); err != nil {
				return ocError(errOut, fmt.Errorf("unable to set channel: %w", err))
			}
			return nil
		},
	}
	cf.add(c.Flags())
	c.Flags().BoolVar(&allowExplicit, "allow-explicit-channel", false, "Change the channel, even if there is no known compatible channel or the channel is not one of the available channels.")
	return c
}
