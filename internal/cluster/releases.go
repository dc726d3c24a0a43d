package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	configv1 "github.com/openshift/api/config/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capstan-dev/capstan/internal/atomicfile"
	"github.com/capstan-dev/capstan/internal/component"
	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/operators"
	"github.com/capstan-dev/capstan/internal/planted"
	"github.com/capstan-dev/capstan/internal/ports"
	"github.com/capstan-dev/capstan/internal/registry"
	"github.com/capstan-dev/capstan/internal/release"
	"github.com/capstan-dev/capstan/internal/release/signature"
	"github.com/capstan-dev/capstan/internal/updateservice"
	"github.com/capstan-dev/capstan/internal/updateservice/demo"
)

// ReleaseOptions configure the release half of capstan up: an OCI
// registry holding the release images, the signature store, the update
// service, and the Cluster Version Operator.
type ReleaseOptions struct {
	// Address serves the registry (/v2/), the update graph
	// (/api/upgrades_info/v1/graph) and the signatures (/signatures/).
	Address string
	// Channel is the channel of a new cluster (the chapter's fast-4.11).
	Channel string
	// InstallVersion is the release a new cluster runs.
	InstallVersion string
	// PromQLURL is where the CVO evaluates PromQL risks; empty, they
	// cannot be evaluated.
	PromQLURL string
	// GraphReload is how often the update service reads its releases and
	// graph data again.
	GraphReload time.Duration
	// CVO tunes the operator (timings).
	CVO cvo.Options
	// Versions are the releases a new cluster's registry is filled with,
	// oldest first, built as the demo releases are (demo.Versions when
	// empty).
	Versions []string
	// GraphData writes a new cluster's update graph data into a directory
	// (the demo graph when nil).
	GraphData func(dir string) error
	// Hold, when set, keeps the CVO from starting until it is closed: a
	// simulation restores a snapshot before the CVO syncs its release.
	Hold <-chan struct{}
}

// DefaultReleaseOptions serve on 127.0.0.1:6444 with the demo graph.
func DefaultReleaseOptions() ReleaseOptions {
	return ReleaseOptions{Address: "127.0.0.1:6444", Channel: "fast-4.11", InstallVersion: demo.Versions[0],
		GraphReload: time.Minute, CVO: cvo.DefaultOptions()}
}

// Where the release server keeps its state in the data dir.
const (
	releasesDir       = "releases"
	releaseRepository = "ocp/release"
	// signaturesDir, in the releases directory, is the signature store.
	signaturesDir = "signatures"
	// RegistryAuthFile, in the releases directory, grants pushes to the
	// registry (see Cluster.RegistryAuth).
	RegistryAuthFile = "auth.json"
)

// startReleases serves the registry, the signatures and the update
// graph, fills them with the demo releases on a new cluster, and runs the
// CVO. A busy address is a warning: the rest of the cluster runs.
func (c *Cluster) startReleases(ctx, runCtx context.Context) error {
	o := *c.opts.Releases
	dir := c.ControlPlane.DataDir().Path(releasesDir)
	reg, err := registry.Open(filepath.Join(dir, "registry"))
	if err != nil {
		return err
	}
	for _, w := range reg.Warnings {
		c.Warnings = append(c.Warnings, "releases: "+w)
	}
	ln, err := net.Listen("tcp", o.Address)
	if err != nil {
		c.Warnings = append(c.Warnings, fmt.Sprintf("releases: %v (no registry, update service or cluster version operator)", err))
		return nil
	}
	host := ln.Addr().String()
	c.ReleasesURL = "http://" + host
	// capstan's own pushes authenticate as the registry's user, with
	// the credentials it keeps in its directory.
	c.RegistryAuth = filepath.Join(dir, RegistryAuthFile)
	if err := reg.WriteDockerConfig(c.RegistryAuth, host); err != nil {
		return err
	}
	kc, err := release.ReadAuthFile(c.RegistryAuth)
	if err != nil {
		return err
	}
	ctx = release.WithKeychain(ctx, kc)
	mux := http.NewServeMux()
	mux.Handle("/v2/", reg)
	sigDir := filepath.Join(dir, signaturesDir)
	if err := os.MkdirAll(sigDir, 0o755); err != nil {
		return err
	}
	mux.Handle("/signatures/", http.StripPrefix("/signatures/", http.FileServer(http.Dir(sigDir))))
	graph := &lateHandler{}
	for _, p := range updateservice.GraphPaths {
		mux.Handle(p, graph)
	}
	// Pulls need no credentials on loopback: only loopback names may
	// ask (a rebound web page's may not).
	var h http.Handler = mux
	if ports.LoopbackOnly(o.Address) == nil {
		h = ports.LoopbackHosts(h)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	c.run(runCtx, "release-server", func(ctx context.Context) error { return component.Serve(ctx, srv, ln) })

	repo := host + "/" + releaseRepository
	key, err := signingKey(filepath.Join(dir, "release-signing-key.asc"))
	if err != nil {
		return err
	}
	graphData := filepath.Join(dir, "graph-data")
	if _, err := os.Stat(graphData); errors.Is(err, os.ErrNotExist) {
		write := o.GraphData
		if write == nil {
			write = demo.WriteGraphData
		}
		// Whole or not at all: a power loss after a plain write left
		// empty channel files, which no later start would mend.
		writeDir := atomicfile.WriteDir
		if planted.On(planted.GraphDataUnsynced) {
			writeDir = func(dir string, fill func(string) error) error { return fill(dir) }
		}
		if err := writeDir(graphData, write); err != nil {
			return err
		}
	}
	if err := ensureNamespace(ctx, c, signature.Namespace); err != nil {
		return err
	}
	r, _ := name.NewRepository(repo, name.WeakValidation)
	if tags, err := remote.List(r, remote.WithContext(ctx)); err != nil || len(tags) == 0 {
		if err := c.publishDemoReleases(ctx, repo, o.Versions, key, sigDir, "http://"+host+"/signatures"); err != nil {
			return fmt.Errorf("publishing the demo releases: %w", err)
		}
	}
	svc, err := updateservice.New(ctx, repo, graphData)
	if err != nil {
		return err
	}
	graph.set(svc)
	// Whoever looks at the cluster's events sees an image of the release
	// repository the graph leaves out, on the ClusterVersion.
	usID, err := c.as(ctx, "update-service")
	if err != nil {
		return err
	}
	svc.RecordSkips(runCtx, usID.kube, cvo.ClusterVersionRef)
	c.run(runCtx, "update-service", func(ctx context.Context) error {
		svc.Run(ctx, o.GraphReload)
		return nil
	})

	cvoID, err := c.as(ctx, "cvo")
	if err != nil {
		return err
	}
	config := cvoID.config
	co := o.CVO
	co.Upstream = "http://" + host + "/api/upgrades_info/v1/graph"
	co.PromQLURL = o.PromQLURL
	if co.PromQLURL == "" && c.PrometheusURL != "" {
		// capstan's own Prometheus answers the queries.
		co.PromQLURL = c.PrometheusURL
	}
	co.Channel = o.Channel
	installed, err := remote.Head(r.Tag(o.InstallVersion+"-x86_64"), remote.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("the release %s to install: %w", o.InstallVersion, err)
	}
	co.Current = configv1.Release{Version: o.InstallVersion, Image: r.Digest(installed.Digest.String()).String()}
	co.Kube = cvoID.kube
	if co.Applier, err = cvo.NewApplier(cvoID.cfg); err != nil {
		return err
	}
	// The operators of the release report their ClusterOperators;
	// capstan's own components add whether they really run.
	health := map[string]operators.Health{
		"kube-scheduler":     c.componentHealth("scheduler", "the scheduler"),
		"machine-api":        c.componentHealth("machine API", "the Machine API controllers"),
		"cluster-autoscaler": c.componentHealth("autoscaler", "the cluster autoscaler"),
		"machine-config":     c.componentHealth("machine-config", "the Machine Config Operator's controllers"),
	}
	operands := map[string]operators.Operand{}
	if mc := c.machineConfig; mc != nil {
		// machine-config reports a release once the control-plane nodes
		// run its configuration.
		operands["machine-config"] = func(version string) operators.OperandState {
			s := mc.Operator(version)
			return operators.OperandState{AtVersion: s.Done, Progressing: s.Progressing,
				DegradedReason: s.DegradedReason, DegradedMessage: s.DegradedMessage,
				NotUpgradeableReason: s.NotUpgradeableReason, NotUpgradeableMessage: s.NotUpgradeableMessage}
		}
	}
	// The operators are the simulated infrastructure's.
	simID, err := c.as(ctx, "sim")
	if err != nil {
		return err
	}
	reporter := operators.New(simID.kube, simID.config, health, operands)
	c.run(runCtx, "cluster-operators", reporter.Run)
	sup := &cvoSupervisor{config: config, opts: co}
	c.cvo.Store(sup)
	metrics, err := cvo.NewMetrics(runCtx, config, sup.operator, co.Upstream)
	if err != nil {
		return err
	}
	c.addMetrics(JobCVO, metrics)
	monitor := c.monitor
	c.run(runCtx, "cluster-version-operator", func(ctx context.Context) error {
		if o.Hold != nil {
			select {
			case <-ctx.Done():
				return nil
			case <-o.Hold:
			}
		}
		if monitor != nil && o.PromQLURL == "" {
			// Risks are evaluated on what was scraped: every job once,
			// before the operator asks, or a risk on a job not yet
			// scraped would find no series and its update would stay
			// Unknown until the evaluation is cached no more (an hour).
			// Each job's first scrape comes within one interval.
			if err := monitor.WaitScraped(ctx, monitor.Jobs()...); err != nil {
				return err
			}
		}
		return sup.run(ctx)
	})
	return nil
}

// publishDemoReleases pushes releases of versions (the demo releases when
// empty) and publishes a signature of each, in the signature store and as
// a ConfigMap. Each release carries the cluster's public key and that
// store in its verification manifest: the CVO running it verifies the
// next release with them, and with nothing from the cluster's own
// ConfigMaps.
func (c *Cluster) publishDemoReleases(ctx context.Context, repo string, versions []string, key *openpgp.Entity, sigDir, store string) error {
	pub, err := signature.ArmorPublicKey(key)
	if err != nil {
		return err
	}
	if len(versions) == 0 {
		versions = demo.Versions
	}
	built, err := demo.BuildVersions(ctx, repo, versions, &demo.Verification{
		Keys: map[string][]byte{"capstan": pub}, Stores: map[string]string{"capstan": store}})
	if err != nil {
		return err
	}
	for _, b := range built {
		if err := c.publishSignature(ctx, key, sigDir, b.Digest.String(), b.Ref.String()); err != nil {
			return err
		}
	}
	return nil
}

// publishSignature signs a release digest with key and publishes the
// signature in the store (sigDir) and as a ConfigMap.
func (c *Cluster) publishSignature(ctx context.Context, key *openpgp.Entity, sigDir, digest, reference string) error {
	sig, err := signature.Sign(key, digest, reference, time.Now())
	if err != nil {
		return err
	}
	if err := signature.WriteToDir(sigDir, digest, sig); err != nil {
		return err
	}
	cm, err := signature.ConfigMap(digest, sig)
	if err != nil {
		return err
	}
	if _, err := c.Client.CoreV1().ConfigMaps(signature.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// SignRelease signs a release pushed to the cluster's registry with the
// cluster's release signing key, as its demo releases are: the CVO then
// verifies an update to it without --force.
func (c *Cluster) SignRelease(ctx context.Context, digest, reference string) error {
	dir := c.ControlPlane.DataDir().Path(releasesDir)
	key, err := signingKey(filepath.Join(dir, "release-signing-key.asc"))
	if err != nil {
		return err
	}
	return c.publishSignature(ctx, key, filepath.Join(dir, signaturesDir), digest, reference)
}

// signingKey loads the cluster's release signing key, or makes one.
func signingKey(path string) (*openpgp.Entity, error) {
	if raw, err := os.ReadFile(path); err == nil {
		ring, err := signature.ReadKeyring(raw)
		if err != nil || len(ring) == 0 || ring[0].PrivateKey == nil {
			return nil, fmt.Errorf("%s is not an OpenPGP private key: %v", path, err)
		}
		return ring[0], nil
	}
	e, err := openpgp.NewEntity("capstan release signing", "", "release-signing@capstan.dev", nil)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w, err := armor.Encode(&buf, openpgp.PrivateKeyType, nil)
	if err != nil {
		return nil, err
	}
	if err := e.SerializePrivate(w, nil); err != nil {
		return nil, err
	}
	w.Close()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	return e, atomicfile.Write(path, buf.Bytes(), 0o600)
}

// lateHandler answers 503 until the update service is loaded.
type lateHandler struct {
	h atomic.Pointer[http.Handler]
}

func (l *lateHandler) set(h http.Handler) { l.h.Store(&h) }

func (l *lateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := l.h.Load()
	if h == nil {
		http.Error(w, "the update service is starting", http.StatusServiceUnavailable)
		return
	}
	(*h).ServeHTTP(w, r)
}
