package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/capstan-dev/capstan/internal/image"
	"github.com/capstan-dev/capstan/internal/release"
)

func newAdmImageCommand() *cobra.Command {
	c := &cobra.Command{Use: "image", Short: "Build capstan's own container image"}
	c.AddCommand(newAdmImageBuildCommand())
	return c
}

func newAdmImageBuildCommand() *cobra.Command {
	var to, toDir, binary, registryConfig string
	c := &cobra.Command{
		Use:   "build (--to REF | --to-dir DIR) [--binary PATH]",
		Short: "Build a minimal, reproducible OCI image of capstan and push it or write it to a directory",
		Long: `Builds the image the deploy/ manifests run: one layer with the static capstan
binary at /usr/bin/capstan, a passwd entry for the non-root user 65532 it
runs as, and a writable /tmp. It has no shell and nothing else. Every
timestamp, owner and order in it is fixed, so the same binary always
gives the same digest.

The binary is this capstan unless --binary names another; it must be
statically linked:

  CGO_ENABLED=0 go build -o capstan ./cmd/capstan
  ./capstan adm image build --to quay.io/ORG/capstan:TAG`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if (to == "") == (toDir == "") {
				return errors.New("say where the image goes: exactly one of --to REF and --to-dir DIR")
			}
			if binary == "" {
				self, err := os.Executable()
				if err != nil {
					return fmt.Errorf("finding this binary (use --binary): %w", err)
				}
				binary = self
			}
			img, err := image.Build(binary)
			if err != nil {
				return err
			}
			digest, err := img.Digest()
			if err != nil {
				return err
			}
			if toDir != "" {
				if err := image.WriteDir(img, toDir); err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "Wrote %s into the OCI layout %s\n", digest, toDir)
				return nil
			}
			ctx, err := registryContext(c.Context(), registryConfig)
			if err != nil {
				return err
			}
			ref, err := image.Push(ctx, img, to, release.Keychain(ctx))
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "Pushed %s\n", ref)
			return nil
		},
	}
	c.Flags().StringVar(&to, "to", "", "push the image to this reference (REGISTRY/REPOSITORY[:TAG])")
	c.Flags().StringVar(&toDir, "to-dir", "", "write the image as an OCI image layout in this directory")
	c.Flags().StringVar(&binary, "binary", "", "the static capstan binary to put in the image (default: this one)")
	c.Flags().StringVarP(&registryConfig, "registry-config", "a", "", "Docker config (auth.json) with credentials for --to (default: the capstan cluster's DATA_DIR/releases/auth.json, when it exists)")
	return c
}
