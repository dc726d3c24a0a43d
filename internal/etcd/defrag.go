package etcd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"

	"github.com/capstan-dev/capstan/internal/waitfor"
)

// Defragmentation, as the cluster-etcd-operator's DefragController does
// it: a member whose database file is at least MinBytes and at least
// MaxFragmentedPercent free pages is defragmented, one member at a time,
// the leader last, learners never (they do not serve the call), and only
// while every voting member is healthy; after each, the cluster is given
// Settle and must be healthy again before the next. Upstream leaves a
// NOSPACE alarm to the admin; capstan disarms it once the defragmented
// members are back under the quota, since an alarm that stays makes the
// cluster read-only for good.
const (
	// DefaultDefragMinBytes is upstream's minDefragBytes.
	DefaultDefragMinBytes int64 = 100 << 20
	// DefaultDefragMaxFragmentedPercent is upstream's
	// maxFragmentedPercentage.
	DefaultDefragMaxFragmentedPercent = 45.0
	// DefaultDefragSettle is upstream's minDefragWaitDuration.
	DefaultDefragSettle = 36 * time.Second
	// DefaultDefragInterval is upstream's resync: the apiserver's
	// compaction interval and a minute, so that a defragmentation
	// follows a compaction.
	DefaultDefragInterval = 11 * time.Minute
	// DefragDisableConfigMap in the operator's namespace turns
	// defragmentation off, as upstream's etcd-disable-defrag does.
	DefragDisableConfigMap = "etcd-disable-defrag"
)

// Defragger defragments a cluster's members.
type Defragger struct {
	// Client reaches every member (Status and Defragment dial the
	// member's own URL).
	Client *clientv3.Client
	// Members lists the members with their health.
	Members func(context.Context) ([]MemberStatus, error)
	// Event records what was done, as the operator's events.
	Event func(ctx context.Context, reason, message string)

	MinBytes             int64
	MaxFragmentedPercent float64
	Settle               time.Duration
	// Quota is the members' backend quota (QuotaBackendBytes): a NOSPACE
	// alarm is disarmed once the member's database is under it.
	Quota int64
}

// FragmentedPercent is how much of a database file is free pages, in
// percent of the file, rounded to hundredths as upstream does.
func FragmentedPercent(onDisk, inUse int64) float64 {
	if onDisk <= 0 {
		return 0
	}
	return math.Round(float64(onDisk-inUse)/float64(onDisk)*100*100) / 100
}

// Run makes one pass: it defragments the members that need it, then
// disarms the NOSPACE alarms the members' sizes no longer justify.
func (d *Defragger) Run(ctx context.Context) error {
	members, err := d.Members(ctx)
	if err != nil {
		return err
	}
	if err := allHealthy(members); err != nil {
		return fmt.Errorf("not defragmenting: %w", err)
	}
	alarms, err := d.Client.AlarmList(ctx)
	if err != nil {
		return fmt.Errorf("listing etcd's alarms: %w", err)
	}
	nospace := map[uint64]bool{}
	for _, a := range alarms.Alarms {
		if a.Alarm == etcdserverpb.AlarmType_NOSPACE {
			nospace[a.MemberID] = true
		}
	}
	statuses, err := d.statusesLeaderLast(ctx, members)
	if err != nil {
		return err
	}
	var errs []error
	for _, st := range statuses {
		frag := FragmentedPercent(st.status.DbSize, st.status.DbSizeInUse)
		// Under the alarm any free page counts: the cluster takes no
		// write until its database shrinks.
		due := frag >= d.MaxFragmentedPercent && st.status.DbSize >= d.MinBytes
		if !due && !(len(nospace) > 0 && frag > 0) {
			continue
		}
		d.Event(ctx, "DefragControllerDefragmentAttempt", fmt.Sprintf("Attempting defrag on member: %s, memberID: %x, dbSize: %d, dbInUse: %d, leader ID: %d",
			st.m.Name, st.m.ID, st.status.DbSize, st.status.DbSizeInUse, st.status.Leader))
		if _, err := d.Client.Defragment(ctx, st.m.ClientURL); err != nil {
			msg := fmt.Sprintf("failed defrag on member: %s, memberID: %x: %v", st.m.Name, st.m.ID, err)
			d.Event(ctx, "DefragControllerDefragmentFailed", msg)
			errs = append(errs, errors.New(msg))
			continue
		}
		d.Event(ctx, "DefragControllerDefragmentSuccess", fmt.Sprintf("etcd member has been defragmented: %s, memberID: %d", st.m.Name, st.m.ID))
		if err := d.settle(ctx); err != nil {
			errs = append(errs, err)
			break
		}
	}
	if len(nospace) > 0 {
		errs = append(errs, d.disarm(ctx, members, nospace))
	}
	return errors.Join(errs...)
}

func allHealthy(members []MemberStatus) error {
	var sick []string
	for _, m := range members {
		if !m.Learner && (!m.Started || !m.Healthy) {
			sick = append(sick, m.Name)
		}
	}
	if len(sick) > 0 {
		return fmt.Errorf("cluster is unhealthy: members %s are not healthy", strings.Join(sick, ", "))
	}
	return nil
}

type memberStatusResponse struct {
	m      MemberStatus
	status *clientv3.StatusResponse
}

// statusesLeaderLast asks every voting member with a URL for its status;
// the leader goes last, as its defragmentation blocks the cluster's
// writes meanwhile.
func (d *Defragger) statusesLeaderLast(ctx context.Context, members []MemberStatus) ([]memberStatusResponse, error) {
	var out []memberStatusResponse
	var leader *memberStatusResponse
	for _, m := range members {
		if m.Learner || m.ClientURL == "" {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := d.Client.Status(sctx, m.ClientURL)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("status of etcd member %s: %w", m.Name, err)
		}
		if leader == nil && st.Leader == m.ID {
			leader = &memberStatusResponse{m, st}
			continue
		}
		out = append(out, memberStatusResponse{m, st})
	}
	if leader != nil {
		out = append(out, *leader)
	}
	return out, nil
}

// settle gives the cluster Settle, then waits up to a minute for every
// voting member to be healthy again.
func (d *Defragger) settle(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d.Settle):
	}
	err := waitfor.Poll(ctx, 2*time.Second, time.Minute, func(ctx context.Context) (bool, string, error) {
		members, err := d.Members(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		if err := allHealthy(members); err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
	if err != nil {
		return fmt.Errorf("timeout waiting for cluster to stabilize after defrag: %w", err)
	}
	return nil
}

// disarm clears the NOSPACE alarm of each member whose database is under
// the quota again.
func (d *Defragger) disarm(ctx context.Context, members []MemberStatus, nospace map[uint64]bool) error {
	var errs []error
	for _, m := range members {
		if !nospace[m.ID] || m.ClientURL == "" {
			continue
		}
		st, err := d.Client.Status(ctx, m.ClientURL)
		if err != nil {
			errs = append(errs, fmt.Errorf("status of etcd member %s: %w", m.Name, err))
			continue
		}
		if d.Quota > 0 && st.DbSize >= d.Quota {
			errs = append(errs, fmt.Errorf("etcd member %s's database is %d bytes, at its quota of %d even defragmented: its NOSPACE alarm stays (delete objects, or raise the quota)", m.Name, st.DbSize, d.Quota))
			continue
		}
		if _, err := d.Client.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: m.ID, Alarm: etcdserverpb.AlarmType_NOSPACE}); err != nil {
			errs = append(errs, fmt.Errorf("disarming the NOSPACE alarm of etcd member %s: %w", m.Name, err))
			continue
		}
		klog.InfoS("Disarmed an etcd member's NOSPACE alarm: its database is under the quota again", "member", m.Name, "dbSize", st.DbSize, "quota", d.Quota)
		d.Event(ctx, "DefragControllerAlarmDisarmed", fmt.Sprintf("etcd member %s's NOSPACE alarm was disarmed: its database is %d bytes, under the quota of %d", m.Name, st.DbSize, d.Quota))
	}
	return errors.Join(errs...)
}
