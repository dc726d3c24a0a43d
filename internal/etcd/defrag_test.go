package etcd_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/capstan-dev/capstan/internal/etcd"
)

// A cluster that filled its quota takes no write (NOSPACE), and freeing
// its keys does not give the space back: the defragmentation does, one
// member at a time and the leader last, and then the alarm is disarmed
// and writes are taken again.
func TestDefragmentationDisarmsANoSpaceAlarm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testConfig(t)
	cfg.QuotaBackendBytes = 16 << 20
	c, _ := threeVoters(t, cfg)
	cl := proxyClient(t, cfg, c)
	value := strings.Repeat("x", 512<<10)
	var full error
	for i := 0; i < 200 && full == nil; i++ {
		_, full = cl.Put(ctx, fmt.Sprintf("/registry/fill/%03d", i), value)
	}
	if full == nil || !strings.Contains(full.Error(), "database space exceeded") {
		t.Fatalf("writing 100 MiB into a 16 MiB quota: %v, want the database space exceeded", full)
	}
	del, err := cl.Delete(ctx, "/registry/fill/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(ctx, "/registry/after", "freed"); err == nil {
		t.Fatal("a write was taken under the NOSPACE alarm before the defragmentation")
	}

	leaderBefore := leaderName(t, c)
	var mu sync.Mutex
	var events []string
	d := &etcd.Defragger{Client: c.Client(), Members: c.Members, Quota: cfg.QuotaBackendBytes,
		MinBytes: 1 << 20, MaxFragmentedPercent: etcd.DefaultDefragMaxFragmentedPercent,
		Event: func(_ context.Context, reason, message string) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, reason+": "+message)
		}}
	if err := d.Run(ctx); err != nil {
		t.Fatalf("defragmenting: %v (events %q)", err, events)
	}
	alarms, err := cl.AlarmList(ctx)
	if err != nil || len(alarms.Alarms) != 0 {
		t.Fatalf("alarms after the defragmentation: %v, %v", alarms, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cl.Put(wctx, "/registry/after", "freed"); err != nil {
		t.Fatalf("a write after the defragmentation: %v", err)
	}
	var defragged []string
	for _, e := range events {
		if name, ok := strings.CutPrefix(e, "DefragControllerDefragmentSuccess: etcd member has been defragmented: "); ok {
			defragged = append(defragged, strings.Split(name, ",")[0])
		}
	}
	// The leader may have changed meanwhile (rarely): either is right.
	leaderAfter := leaderName(t, c)
	if len(defragged) != 3 || (defragged[2] != leaderBefore && defragged[2] != leaderAfter) {
		t.Errorf("defragmented %v; want the three members, the leader %s last (events %q)", defragged, leaderBefore, events)
	}
	if !slicesContainsPrefix(events, "DefragControllerAlarmDisarmed") {
		t.Errorf("no event says the alarm was disarmed: %q", events)
	}
}

func slicesContainsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

func leaderName(t *testing.T, c *etcd.Cluster) string {
	t.Helper()
	members, err := c.Members(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if m.ID == m.Leader {
			return m.Name
		}
	}
	return ""
}
