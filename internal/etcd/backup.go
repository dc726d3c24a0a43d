package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// Backup and restore, as OpenShift documents them: cluster-backup.sh
// saves a snapshot of a healthy member (etcdctl snapshot save), and
// cluster-restore.sh, on one control-plane host, moves every member's
// data aside, restores the snapshot as a cluster of that one member
// (etcdutl snapshot restore, the revision bumped and marked compacted so
// that no client mistakes the restored state for an older one), and lets
// the etcd operator add the other members again.

// NewClusterToken is the initial cluster token of a new cluster, or of
// a restored one: etcd derives the cluster's and its members' IDs from it
// and the peer URLs, so it is new each time (upstream's restore uses
// openshift-etcd-<UUID>), and two restores of one data dir never make
// clusters with the same IDs, whose members could take each other's
// messages as their own cluster's.
func NewClusterToken() string { return "capstan-etcd-" + string(uuid.NewUUID()) }

// SnapshotStatus describes a saved snapshot, as etcdutl snapshot status.
type SnapshotStatus struct {
	Member    string
	Hash      uint32
	Revision  int64
	TotalKeys int
	TotalSize int64
	Version   string
}

// SaveSnapshot saves a snapshot of the etcd of dataDir to path: from the
// leader when a member names one, else from the first member that
// answers (a member without quorum still has its data to give). The file
// is written beside path, synced, checked and then renamed into place,
// so a snapshot that is there is whole.
func SaveSnapshot(ctx context.Context, dataDir string, tls TLSFiles, path string) (SnapshotStatus, error) {
	specs, err := ReadRegistry(dataDir)
	if err != nil {
		return SnapshotStatus{}, fmt.Errorf("reading the etcd members of %s: %w", dataDir, err)
	}
	tlsConfig, err := transport.TLSInfo{CertFile: tls.ClientCert, KeyFile: tls.ClientKey, TrustedCAFile: tls.CA}.ClientConfig()
	if err != nil {
		return SnapshotStatus{}, fmt.Errorf("etcd's client certificate in %s: %w", dataDir, err)
	}
	var candidates []MemberSpec
	for _, s := range specs {
		if !s.Adding && !s.Removing {
			candidates = append(candidates, s)
		}
	}
	if len(candidates) == 0 {
		return SnapshotStatus{}, fmt.Errorf("%s lists no etcd member (is it a capstan data dir that was started?)", dataDir)
	}
	from, err := pickSnapshotMember(ctx, candidates, tlsConfig)
	if err != nil {
		return SnapshotStatus{}, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return SnapshotStatus{}, err
	}
	lg := zap.NewNop()
	version, err := snapshot.NewV3(lg).Save(ctx, clientv3.Config{Endpoints: []string{from.ClientURL()}, TLS: tlsConfig,
		DialTimeout: 5 * time.Second, Logger: lg}, path)
	if err != nil {
		return SnapshotStatus{}, fmt.Errorf("saving a snapshot of member %s: %w", from.Name, err)
	}
	st, err := snapshot.NewV3(lg).Status(path)
	if err != nil {
		_ = os.Remove(path)
		return SnapshotStatus{}, fmt.Errorf("the snapshot of member %s does not check: %w", from.Name, err)
	}
	return SnapshotStatus{Member: from.Name, Hash: st.Hash, Revision: st.Revision, TotalKeys: st.TotalKey, TotalSize: st.TotalSize, Version: version}, nil
}

// pickSnapshotMember is the leader, or the first member that answers.
func pickSnapshotMember(ctx context.Context, specs []MemberSpec, tlsConfig *tls.Config) (MemberSpec, error) {
	var answered []MemberSpec
	var errs []error
	for _, s := range specs {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.ClientURL()}, TLS: tlsConfig, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		st, err := c.Status(sctx, s.ClientURL())
		cancel()
		c.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("member %s: %w", s.Name, err))
			continue
		}
		if st.Leader == st.Header.MemberId {
			return s, nil
		}
		answered = append(answered, s)
	}
	if len(answered) > 0 {
		return answered[0], nil
	}
	return MemberSpec{}, fmt.Errorf("no etcd member answers (is capstan up running on this data dir?): %w", errors.Join(errs...))
}

// CheckSnapshot reads a snapshot file's status, refusing a file that is
// not a whole etcd snapshot.
func CheckSnapshot(path string) (SnapshotStatus, error) {
	if _, err := os.Stat(path); err != nil {
		return SnapshotStatus{}, err
	}
	st, err := snapshot.NewV3(zap.NewNop()).Status(path)
	if err != nil {
		return SnapshotStatus{}, fmt.Errorf("%s is not an etcd snapshot: %w", path, err)
	}
	return SnapshotStatus{Hash: st.Hash, Revision: st.Revision, TotalKeys: st.TotalKey, TotalSize: st.TotalSize}, nil
}

// RevisionBump is how far a restore moves the revision on, as
// OpenShift's cluster-restore.sh does: clients watching from a revision
// of the lost history relist instead of missing what changed.
const RevisionBump = 1_000_000_000

// RestoreResult says what a restore did.
type RestoreResult struct {
	// Member is the one member of the restored cluster.
	Member string
	// Aside is where every member's former data was moved.
	Aside    string
	Snapshot SnapshotStatus
}

// Restore makes the etcd of dataDir a cluster of one member restored from
// the snapshot at from: every member's data is moved aside, under
// etcd-backup-<time>, the member (member, or by default the first
// control-plane machine's the registry lists, the bootstrap member's
// when it is the only one) gets the snapshot's data, and the registry
// lists it alone. capstan must not run on dataDir (the caller holds its
// lock). At the next start the member serves alone and the etcd
// operator adds the other machines' members.
func Restore(dataDir, from, member string) (RestoreResult, error) {
	st, err := CheckSnapshot(from)
	if err != nil {
		return RestoreResult{}, err
	}
	specs, err := ReadRegistry(dataDir)
	if err != nil {
		return RestoreResult{}, fmt.Errorf("reading the etcd members of %s: %w", dataDir, err)
	}
	if len(specs) == 0 {
		return RestoreResult{}, fmt.Errorf("%s lists no etcd member: there is nothing to restore into (start the cluster once with capstan up)", dataDir)
	}
	target, err := restoreTarget(specs, member)
	if err != nil {
		return RestoreResult{}, err
	}
	if err := waitForNoMembers(context.Background(), dataDir, othersMembersTimeout); err != nil {
		return RestoreResult{}, err
	}
	aside := filepath.Join(dataDir, "etcd-backup-"+time.Now().UTC().Format("20060102T150405"))
	if err := os.MkdirAll(aside, 0o700); err != nil {
		return RestoreResult{}, err
	}
	for _, s := range specs {
		dir := filepath.Join(dataDir, s.Dir)
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := os.Rename(dir, filepath.Join(aside, s.Name)); err != nil {
			return RestoreResult{}, fmt.Errorf("moving the data of member %s aside: %w", s.Name, err)
		}
	}
	target.Adding, target.Removing, target.Stopped, target.Added, target.Voting = false, false, false, time.Time{}, true
	err = snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        from,
		Name:                target.Name,
		OutputDataDir:       filepath.Join(dataDir, target.Dir),
		PeerURLs:            []string{target.PeerURL()},
		InitialCluster:      target.Name + "=" + target.PeerURL(),
		InitialClusterToken: NewClusterToken(),
		RevisionBump:        RevisionBump,
		MarkCompacted:       true,
	})
	if err != nil {
		return RestoreResult{}, fmt.Errorf("restoring the snapshot into member %s: %w (the former data is in %s)", target.Name, err, aside)
	}
	c := &Cluster{cfg: Config{DataDir: dataDir, Bootstrap: MemberSpec{Dir: target.Dir}}, registry: []MemberSpec{target}}
	if err := c.writeRegistryLocked(); err != nil {
		return RestoreResult{}, err
	}
	return RestoreResult{Member: target.Name, Aside: aside, Snapshot: st}, nil
}

// restoreTarget is the member a restore goes into.
func restoreTarget(specs []MemberSpec, member string) (MemberSpec, error) {
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	sort.Strings(names)
	if member != "" {
		for _, s := range specs {
			if s.Name == member {
				return s, nil
			}
		}
		return MemberSpec{}, fmt.Errorf("--member %s is not an etcd member of this data dir (members: %s)", member, strings.Join(names, ", "))
	}
	sorted := slices.Clone(specs)
	sort.SliceStable(sorted, func(i, j int) bool {
		// A control-plane machine's member first, running ones first:
		// the bootstrap member leaves once the others are back.
		a, b := sorted[i], sorted[j]
		if (a.Name == BootstrapName) != (b.Name == BootstrapName) {
			return b.Name == BootstrapName
		}
		if a.Stopped != b.Stopped {
			return b.Stopped
		}
		return a.Name < b.Name
	})
	return sorted[0], nil
}

// QuorumRestore makes the etcd of dataDir a cluster of one member from
// that member's own data, as OpenShift's quorum-restore.sh does when a
// quorum of members is lost but one survives: nothing it committed is
// lost, where a snapshot loses what was written after it. The other
// members' data is moved aside, under etcd-backup-<time>; the member
// (member, or by default the first control-plane machine's that has its
// data) runs once with --force-new-cluster, which rewrites the
// membership to itself alone, and the registry lists it alone. capstan
// must not run on dataDir. At the next start the member serves alone and
// the etcd operator adds the other machines' members.
func QuorumRestore(ctx context.Context, dataDir string, tls TLSFiles, member string) (RestoreResult, error) {
	specs, err := ReadRegistry(dataDir)
	if err != nil {
		return RestoreResult{}, fmt.Errorf("reading the etcd members of %s: %w", dataDir, err)
	}
	var survivors []MemberSpec
	for _, s := range specs {
		if _, err := os.Stat(filepath.Join(dataDir, s.Dir, "member")); err == nil && !s.Adding {
			survivors = append(survivors, s)
		}
	}
	if len(survivors) == 0 {
		return RestoreResult{}, fmt.Errorf("no etcd member of %s has its data: restore a snapshot with --from FILE", dataDir)
	}
	target, err := restoreTarget(survivors, member)
	if err != nil {
		if member != "" {
			return RestoreResult{}, fmt.Errorf("--member %s has no data to restore from (members with data: %s)", member, names(survivors))
		}
		return RestoreResult{}, err
	}
	if err := waitForNoMembers(ctx, dataDir, othersMembersTimeout); err != nil {
		return RestoreResult{}, err
	}
	aside := filepath.Join(dataDir, "etcd-backup-"+time.Now().UTC().Format("20060102T150405"))
	if err := os.MkdirAll(aside, 0o700); err != nil {
		return RestoreResult{}, err
	}
	for _, s := range specs {
		dir := filepath.Join(dataDir, s.Dir)
		if _, err := os.Stat(dir); s.Name == target.Name || errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := os.Rename(dir, filepath.Join(aside, s.Name)); err != nil {
			return RestoreResult{}, fmt.Errorf("moving the data of member %s aside: %w", s.Name, err)
		}
	}
	m, err := startMember(memberConfig{spec: target, dir: filepath.Join(dataDir, target.Dir), tls: tls,
		logFile: filepath.Join(dataDir, "etcd-quorum-restore.log"), state: "existing", forceNewCluster: true})
	if err != nil {
		return RestoreResult{}, fmt.Errorf("starting member %s as a new cluster: %w (the other members' data is in %s)", target.Name, err, aside)
	}
	err = m.waitReady(ctx, 2*time.Minute, filepath.Join(dataDir, "etcd-quorum-restore.log"))
	m.Halt()
	if err != nil {
		return RestoreResult{}, fmt.Errorf("member %s as a new cluster: %w (the other members' data is in %s)", target.Name, err, aside)
	}
	target.Adding, target.Removing, target.Stopped, target.Added, target.Voting = false, false, false, time.Time{}, true
	c := &Cluster{cfg: Config{DataDir: dataDir, Bootstrap: MemberSpec{Dir: target.Dir}}, registry: []MemberSpec{target}}
	if err := c.writeRegistryLocked(); err != nil {
		return RestoreResult{}, err
	}
	return RestoreResult{Member: target.Name, Aside: aside}, nil
}

func names(specs []MemberSpec) string {
	var out []string
	for _, s := range specs {
		out = append(out, s.Name)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
