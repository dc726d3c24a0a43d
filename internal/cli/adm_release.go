package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/release"
	"github.com/capstan-dev/capstan/internal/release/signature"
)

func newAdmReleaseCommand() *cobra.Command {
	c := &cobra.Command{Use: "release", Short: "Build, inspect and sign release images, as oc adm release does"}
	c.AddCommand(newReleaseNewCommand(), newReleaseInfoCommand(), newReleaseExtractCommand(), newReleaseSignCommand())
	return c
}

// signFlags publish signatures of a release digest.
type signFlags struct {
	key       string
	storeDir  string
	toCluster bool
	cf        clientFlags
}

func (f *signFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.key, "sign-key", "", "armored or binary OpenPGP private key to sign the release digest with")
	c.Flags().StringVar(&f.storeDir, "signature-store-dir", "", "directory of a signature store to publish the signature in (<dir>/sha256=<hex>/signature-N)")
	c.Flags().BoolVar(&f.toCluster, "to-cluster", false, "publish the signature as a ConfigMap in "+signature.Namespace)
	f.cf.add(c.Flags())
}

func (f *signFlags) validate() error {
	if f.key == "" && (f.storeDir != "" || f.toCluster) {
		return errors.New("--signature-store-dir and --to-cluster need --sign-key")
	}
	if f.key != "" && f.storeDir == "" && !f.toCluster {
		return errors.New("--sign-key needs somewhere to publish: --signature-store-dir DIR and/or --to-cluster")
	}
	return nil
}

// publish signs digest and writes the signature where the flags say.
func (f *signFlags) publish(c *cobra.Command, digest, reference string) error {
	if f.key == "" {
		return nil
	}
	key, err := readPrivateKey(f.key)
	if err != nil {
		return err
	}
	sig, err := signature.Sign(key, digest, reference, time.Now())
	if err != nil {
		return err
	}
	if f.storeDir != "" {
		if err := signature.WriteToDir(f.storeDir, digest, sig); err != nil {
			return fmt.Errorf("publishing the signature: %w", err)
		}
	}
	if f.toCluster {
		client, _, err := f.cf.client()
		if err != nil {
			return err
		}
		cm, err := signature.ConfigMap(digest, sig)
		if err != nil {
			return err
		}
		cms := client.CoreV1().ConfigMaps(signature.Namespace)
		if cur, err := cms.Get(c.Context(), cm.Name, metav1.GetOptions{}); err == nil {
			n := len(cur.BinaryData) + 1
			if cur.BinaryData == nil {
				cur.BinaryData = map[string][]byte{}
			}
			cur.BinaryData[fmt.Sprintf("%s-%d", cm.Name, n)] = sig
			_, err = cms.Update(c.Context(), cur, metav1.UpdateOptions{})
			if err != nil {
				return fmt.Errorf("publishing the signature: %w", err)
			}
		} else if apierrors.IsNotFound(err) {
			if _, err := cms.Create(c.Context(), cm, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("publishing the signature: %w", err)
			}
		} else {
			return err
		}
	}
	fmt.Fprintf(c.OutOrStdout(), "Signed %s as %s\n", digest, reference)
	return nil
}

func readPrivateKey(path string) (*openpgp.Entity, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the signing key: %w", err)
	}
	ring, err := signature.ReadKeyring(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, e := range ring {
		if e.PrivateKey != nil && !e.PrivateKey.Encrypted {
			return e, nil
		}
	}
	return nil, fmt.Errorf("%s holds no unencrypted private key", path)
}

func newReleaseNewCommand() *cobra.Command {
	var (
		fromDir, version, to, toDir, metadata, arch, registryConfig string
		previous, next                                              []string
		sf                                                          signFlags
	)
	c := &cobra.Command{
		Use:   "new --from-dir DIR --version V (--to REF | --to-dir DIR)",
		Short: "Build a release image from a directory of manifests",
		Long: `Builds a release image: release-manifests/ holds DIR's manifests (named
0000_<runlevel>_<component>_<name>.yaml), image-references (DIR's, or an
empty one, named after the version) and release-metadata; DIR/manifests/,
if present, becomes the image's manifests/. The image is pushed to a
registry (--to) or written to an OCI layout directory (--to-dir, tagged
with the version).`,
		Example: `  capstan adm release new --from-dir ./payload --version 4.10.23 --previous 4.10.22 --to localhost:5000/ocp/release:4.10.23-x86_64
  capstan adm release new --from-dir ./payload --version 4.10.23 --to-dir ./releases --sign-key key.asc --signature-store-dir ./signatures`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if fromDir == "" || version == "" {
				return errors.New("--from-dir and --version are required")
			}
			if (to == "") == (toDir == "") {
				return errors.New("give exactly one of --to REF and --to-dir DIR")
			}
			if err := sf.validate(); err != nil {
				return err
			}
			meta := release.Metadata{Version: version, Previous: previous, Next: next}
			if metadata != "" {
				if err := json.Unmarshal([]byte(metadata), &meta.Metadata); err != nil {
					return fmt.Errorf("--metadata must be a JSON object of strings: %w", err)
				}
			}
			p, err := release.LoadDir(fromDir, meta)
			if err != nil {
				return err
			}
			img, err := release.Build(p, release.BuildOptions{Architecture: arch})
			if err != nil {
				return err
			}
			dest := to
			if toDir != "" {
				dest = "oci:" + toDir + ":" + version
			}
			ref, err := release.ParseRef(dest)
			if err != nil {
				return err
			}
			ctx, err := registryContext(c.Context(), registryConfig)
			if err != nil {
				return err
			}
			digest, err := release.Write(ctx, ref, img)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "Built release %s as %s\n", version, ref)
			fmt.Fprintf(c.OutOrStdout(), "Digest: %s\n", digest)
			return sf.publish(c, digest.String(), ref.String())
		},
	}
	c.Flags().StringVar(&fromDir, "from-dir", "", "directory of the release's manifests")
	c.Flags().StringVar(&version, "version", "", "the release's semantic version (the name of its image-references)")
	c.Flags().StringSliceVar(&previous, "previous", nil, "versions this release updates from (release-metadata previous)")
	c.Flags().StringSliceVar(&next, "next", nil, "versions this release updates to (release-metadata next)")
	c.Flags().StringVar(&metadata, "metadata", "", `release-metadata metadata, a JSON object (e.g. {"url":"https://..."})`)
	c.Flags().StringVar(&to, "to", "", "registry reference to push the release image to")
	c.Flags().StringVar(&toDir, "to-dir", "", "OCI layout directory to write the release image to")
	c.Flags().StringVar(&arch, "arch", "amd64", "the image's architecture")
	c.Flags().StringVarP(&registryConfig, "registry-config", "a", "", "Docker config (auth.json) with credentials for --to (default: the capstan cluster's DATA_DIR/releases/auth.json, when it exists)")
	sf.add(c)
	return c
}

func newReleaseSignCommand() *cobra.Command {
	var sf signFlags
	c := &cobra.Command{
		Use:   "sign REF --sign-key KEY (--signature-store-dir DIR | --to-cluster)",
		Short: "Sign a release image's digest and publish the signature",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if sf.key == "" {
				return errors.New("--sign-key is required")
			}
			if err := sf.validate(); err != nil {
				return err
			}
			img, err := readRelease(c, args[0])
			if err != nil {
				return err
			}
			return sf.publish(c, img.Digest.String(), img.Ref.String())
		},
	}
	sf.add(c)
	return c
}

// registryContext authenticates release pushes and pulls with the
// credentials of a Docker config: path, or else the capstan cluster's in
// the default data dir when there is one.
func registryContext(ctx context.Context, path string) (context.Context, error) {
	if path == "" {
		path = filepath.Join(defaultDataDir(), "releases", cluster.RegistryAuthFile)
		if _, err := os.Stat(path); err != nil {
			return ctx, nil
		}
	}
	kc, err := release.ReadAuthFile(path)
	if err != nil {
		return nil, err
	}
	return release.WithKeychain(ctx, kc), nil
}

func readRelease(c *cobra.Command, s string) (*release.Image, error) {
	ref, err := release.ParseRef(s)
	if err != nil {
		return nil, err
	}
	return release.Read(c.Context(), ref)
}

func newReleaseInfoCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "info REF",
		Short: "Describe a release image, as oc adm release info does",
		Long: `Prints a release image's name, digest, creation time, metadata, component
versions and images. REF is a registry reference or oci:DIR[:TAG].`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			img, err := readRelease(c, args[0])
			if err != nil {
				return err
			}
			return release.Describe(c.OutOrStdout(), img)
		},
	}
}

func newReleaseExtractCommand() *cobra.Command {
	var to, file string
	c := &cobra.Command{
		Use:   "extract REF [--to DIR | --file NAME]",
		Short: "Write a release image's manifests, as oc adm release extract does",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			img, err := readRelease(c, args[0])
			if err != nil {
				return err
			}
			if file != "" {
				raw, err := release.File(img, strings.TrimPrefix(file, release.ReleaseManifestsDir+"/"))
				if err != nil {
					return err
				}
				_, err = c.OutOrStdout().Write(raw)
				return err
			}
			return release.Extract(c.OutOrStdout(), img, to)
		},
	}
	c.Flags().StringVar(&to, "to", ".", "directory to write the manifests to")
	c.Flags().StringVar(&file, "file", "", "print one file of the payload instead")
	return c
}
