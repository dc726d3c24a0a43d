package cli

import (
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/plugin"
)

func newKubectlCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "kubectl [kubectl arguments]",
		Short: "Run upstream kubectl against the capstan cluster",
		Long: `Runs the kubectl embedded in capstan. Unless --kubeconfig is among the
arguments, it talks to the cluster in $CAPSTAN_DATA_DIR (default .capstan),
falling back to $KUBECONFIG when no capstan cluster is there.`,
		DisableFlagParsing: true,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 1 && (args[0] == "--help" || args[0] == "-h") {
				return c.Help()
			}
			if !hasKubeconfigFlag(args) {
				if p := resolveKubeconfig("", defaultDataDir()); p != "" {
					args = append([]string{"--kubeconfig=" + p}, args...)
				}
			}
			kubectl := kubectlcmd.NewDefaultKubectlCommandWithArgs(kubectlcmd.KubectlOptions{
				PluginHandler: kubectlcmd.NewDefaultPluginHandler(plugin.ValidPluginFilenamePrefixes),
				Arguments:     append([]string{"kubectl"}, args...),
				ConfigFlags:   defaultConfigFlags(),
				IOStreams:     genericiooptions.IOStreams{In: os.Stdin, Out: c.OutOrStdout(), ErrOut: c.ErrOrStderr()},
			})
			kubectl.SetArgs(args)
			kubectl.SetOut(c.OutOrStdout())
			kubectl.SetErr(c.ErrOrStderr())
			if err := kubectl.Execute(); err != nil {
				return err
			}
			return nil
		},
	}
}

func hasKubeconfigFlag(args []string) bool {
	for _, a := range args {
		if a == "--kubeconfig" || strings.HasPrefix(a, "--kubeconfig=") {
			return true
		}
	}
	return false
}
