package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/capstan-dev/capstan/internal/failpoint"
)

// Membership is the etcd cluster the operator reads and changes: the
// members capstan runs as processes (Cluster), or an etcd whose members
// run on their hosts and that capstan reaches only through etcd's API
// (Remote).
type Membership interface {
	// Members lists the members with their health.
	Members(ctx context.Context) ([]MemberStatus, error)
	// List lists them without asking them anything.
	List(ctx context.Context) ([]MemberStatus, error)
	// AddLearner adds a member for the named machine as a learner.
	AddLearner(ctx context.Context, name string) error
	// Promote makes the named learner a voting member.
	Promote(ctx context.Context, name string) error
	// Remove takes the named member out of the cluster.
	Remove(ctx context.Context, name string) error
	// RemoveID removes a member the cluster lists without a name.
	RemoveID(ctx context.Context, id uint64) error
	// Client is a client of the members (maintenance: status,
	// defragmentation, alarms).
	Client() *clientv3.Client
}

var _ Membership = (*Cluster)(nil)
var _ Membership = (*Remote)(nil)

// ErrHostJoins is AddLearner's answer on a Remote: the member's host adds
// it and starts it (kubeadm join --control-plane, a static pod), since
// only the host can run its process.
var ErrHostJoins = errors.New("a member of an etcd capstan does not run is added by its host")

// RemoteConfig is how to reach an etcd capstan does not run.
type RemoteConfig struct {
	// Endpoints are client URLs of some of its members (https://HOST:2379).
	Endpoints []string
	// CA, Cert and Key are the files of etcd's client TLS: the CA that
	// signed the members' serving certificates, and a client certificate
	// the members trust.
	CA, Cert, Key string
	// Insecure allows http:// endpoints and members whose certificates
	// go unchecked (a test etcd without TLS).
	Insecure bool
}

// Validate names what is missing or malformed.
func (c RemoteConfig) Validate() error {
	var errs []error
	if len(c.Endpoints) == 0 {
		errs = append(errs, errors.New("--etcd-endpoints: at least one member's client URL is needed"))
	}
	for _, e := range c.Endpoints {
		u, err := url.Parse(e)
		switch {
		case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
			errs = append(errs, fmt.Errorf("--etcd-endpoints: %q is not a client URL (https://HOST:PORT)", e))
		case u.Scheme == "http" && !c.Insecure:
			errs = append(errs, fmt.Errorf("--etcd-endpoints: %q is plain HTTP: etcd holds every secret of the cluster (--etcd-insecure allows it)", e))
		}
	}
	if (c.Cert == "") != (c.Key == "") {
		errs = append(errs, errors.New("--etcd-cert and --etcd-key go together"))
	}
	if c.CA == "" && !c.Insecure {
		errs = append(errs, errors.New("--etcd-cacert: the CA of the members' serving certificates is needed to know them (--etcd-insecure goes without)"))
	}
	return errors.Join(errs...)
}

// Remote is an etcd whose members run elsewhere: capstan lists them,
// checks their health, promotes learners and removes members, all through
// etcd's API, and starts or stops no process.
type Remote struct {
	client *clientv3.Client
	health *healthChecker
}

// DialRemote connects to the members of cfg.
func DialRemote(cfg RemoteConfig) (*Remote, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The endpoints follow the membership: a member added is reached, a
	// member removed no longer is.
	cc := clientv3.Config{Endpoints: cfg.Endpoints, DialTimeout: 5 * time.Second, AutoSyncInterval: 10 * time.Second, Logger: zap.NewNop()}
	if cfg.CA != "" || cfg.Cert != "" || cfg.Insecure {
		tlsConfig, err := transport.TLSInfo{CertFile: cfg.Cert, KeyFile: cfg.Key, TrustedCAFile: cfg.CA, InsecureSkipVerify: cfg.Insecure && cfg.CA == ""}.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd client TLS: %w", err)
		}
		cc.TLS = tlsConfig
	}
	client, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("etcd at %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	return &Remote{client: client, health: newHealthChecker(cc.TLS)}, nil
}

// Client is a client of the members.
func (r *Remote) Client() *clientv3.Client { return r.client }

// Close closes the client.
func (r *Remote) Close() error {
	r.health.close()
	return r.client.Close()
}

// Members lists the members with their health.
func (r *Remote) Members(ctx context.Context) ([]MemberStatus, error) {
	out, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	checkHealth(ctx, r.health, out, nil)
	return out, nil
}

// List lists the members.
func (r *Remote) List(ctx context.Context) ([]MemberStatus, error) {
	list, err := r.client.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	var out []MemberStatus
	for _, m := range list.Members {
		out = append(out, statusOf(m))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// AddLearner is the host's: see ErrHostJoins.
func (r *Remote) AddLearner(context.Context, string) error { return ErrHostJoins }

// Promote makes a learner vote; etcd refuses until it has caught up.
func (r *Remote) Promote(ctx context.Context, name string) error {
	m, err := r.byName(ctx, name)
	if err != nil || !m.Learner {
		return err
	}
	if _, err := r.client.MemberPromote(ctx, m.ID); err != nil {
		return fmt.Errorf("promoting member %s: %w", name, err)
	}
	failpoint.Hit(failpoint.EtcdLearnerPromoted)
	r.sync(ctx)
	return nil
}

// sync points the client at the members as they are now.
func (r *Remote) sync(ctx context.Context) {
	_ = r.client.Sync(ctx)
}

// Remove takes a member out of the cluster; its host stops its process.
func (r *Remote) Remove(ctx context.Context, name string) error {
	m, err := r.byName(ctx, name)
	if errors.Is(err, errNoMember) {
		return nil
	}
	if err != nil {
		return err
	}
	return r.RemoveID(ctx, m.ID)
}

// RemoveID removes a member by its ID.
func (r *Remote) RemoveID(ctx context.Context, id uint64) error {
	if _, err := r.client.MemberRemove(ctx, id); err != nil && !strings.Contains(err.Error(), "member not found") {
		return fmt.Errorf("removing member %x: %w", id, err)
	}
	failpoint.Hit(failpoint.EtcdMemberRemoved)
	r.sync(ctx)
	return nil
}

func (r *Remote) byName(ctx context.Context, name string) (MemberStatus, error) {
	list, err := r.client.MemberList(ctx)
	if err != nil {
		return MemberStatus{}, err
	}
	for _, m := range list.Members {
		if m.Name == name {
			return statusOf(m), nil
		}
	}
	return MemberStatus{}, fmt.Errorf("%w: %s", errNoMember, name)
}
