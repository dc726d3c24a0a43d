package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	machinev1 "github.com/openshift/api/machine/v1beta1"
	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/capstan-dev/capstan/internal/datadir"
	"github.com/capstan-dev/capstan/internal/planted"
)

// The keys the API server stores the objects the invariants read under.
const (
	machinesKey     = "/registry/machine.openshift.io/machines/"
	machineSetsKey  = "/registry/machine.openshift.io/machinesets/"
	nodesKey        = "/registry/minions/"
	podsKey         = "/registry/pods/"
	instancesKey    = "/registry/configmaps/capstan-sim/"
	clusterVersions = "/registry/config.openshift.io/clusterversions/"
	operatorsKey    = "/registry/config.openshift.io/clusteroperators/"
	poolsKey        = "/registry/machineconfiguration.openshift.io/machineconfigpools/"
	jobsKey         = "/registry/jobs/openshift-cluster-version/"
	// linKeyPrefix: the objects of the linearizability clients, whose
	// watch events are checked too.
)

// recorded are the prefixes a history keeps.
var recorded = []string{machinesKey, machineSetsKey, nodesKey, podsKey, instancesKey, clusterVersions, operatorsKey, poolsKey, jobsKey, linKeyPrefix}

// Event is one change of a stored object.
type Event struct {
	// Rev is the etcd revision of the change.
	Rev int64
	Key string
	// Obj is the object after the change, nil when it was deleted; Prev
	// the object before, nil when it was created.
	Obj, Prev runtime.Object
}

// History is every change to the recorded objects, in the order etcd
// made them, read from the cluster's own storage: whatever the cluster
// went through (restarts included), the invariants see each revision,
// not what some client happened to observe between them. It follows the
// members of the data dir's etcd as they change.
type History struct {
	dataDir string

	mu     sync.Mutex
	events []Event
	// rev is the last revision read.
	rev int64
	err error
	// cancel ends the current watch (see reconnect).
	cancel context.CancelFunc
}

// decoder reads core objects (protobuf) and OpenShift's (JSON) alike.
var decoder = func() runtime.Decoder {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, machinev1.AddToScheme, configv1.AddToScheme, mcfgv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return serializer.NewCodecFactory(s).UniversalDeserializer()
}()

func decode(raw []byte) (runtime.Object, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	obj, _, err := decoder.Decode(raw, nil, nil)
	return obj, err
}

// record follows the data dir's storage from revision 1 until ctx ends,
// reconnecting whenever the cluster goes away and comes back.
func record(ctx context.Context, dataDir string) *History {
	h := &History{dataDir: dataDir}
	go h.run(ctx)
	return h
}

func (h *History) run(ctx context.Context) {
	for ctx.Err() == nil {
		err := h.follow(ctx)
		if errors.Is(err, rpctypes.ErrCompacted) {
			h.mu.Lock()
			h.err = fmt.Errorf("the storage compacted revisions the history had not read (after %d): %w", h.rev, err)
			h.mu.Unlock()
			return
		}
		h.mu.Lock()
		failed := h.err != nil
		h.mu.Unlock()
		if failed {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// follow watches from the revision after the last one read, until the
// watch fails (the cluster was killed) or ctx ends.
func (h *History) follow(ctx context.Context) error {
	endpoints, err := datadir.StorageEndpoints(h.dataDir)
	if err != nil {
		return err
	}
	client, err := datadir.StorageClient(h.dataDir)
	if err != nil {
		return err
	}
	defer client.Close()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// The storage never goes back: a revision below one the history read
	// means committed changes were lost (etcd restored from an old
	// snapshot, a member's data thrown away). The watch would skip them
	// silently.
	head, err := client.Get(wctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	h.mu.Lock()
	if head.Header.Revision < h.rev {
		h.err = fmt.Errorf("the storage came back at revision %d, before revision %d that the history had read: committed changes were lost", head.Header.Revision, h.rev)
		h.mu.Unlock()
		return h.err
	}
	from := h.rev + 1
	h.cancel = cancel
	h.mu.Unlock()
	// Members come and go (the bootstrap member hands over to the
	// machines' members): the client would keep trying the old ones.
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			if now, err := datadir.StorageEndpoints(h.dataDir); err == nil && !slices.Equal(now, endpoints) {
				cancel()
				return
			}
		}
	}()
	// The watch is resumed every resumeEvery, as etcd's robustness tests
	// open watches from past revisions: a resumption that loses or
	// repeats an event is then seen by the watch checks, kills or not.
	resume := time.AfterFunc(resumeEvery, cancel)
	defer resume.Stop()
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(from)}
	if planted.On(planted.WatchResumesAtHead) && from > 1 {
		opts = opts[:2]
	}
	for resp := range client.Watch(wctx, "/registry/", opts...) {
		if err := resp.Err(); err != nil {
			return err
		}
		var evs []Event
		for _, ev := range resp.Events {
			key := string(ev.Kv.Key)
			if !recordedKey(key) {
				continue
			}
			e := Event{Rev: ev.Kv.ModRevision, Key: key}
			if ev.Type == clientv3.EventTypePut {
				if e.Obj, err = decode(ev.Kv.Value); err != nil {
					return fmt.Errorf("decoding %s at revision %d: %w", key, e.Rev, err)
				}
			}
			if ev.PrevKv != nil {
				if e.Prev, err = decode(ev.PrevKv.Value); err != nil {
					return fmt.Errorf("decoding %s before revision %d: %w", key, e.Rev, err)
				}
			}
			evs = append(evs, e)
		}
		h.mu.Lock()
		h.events = append(h.events, evs...)
		h.rev = max(h.rev, resp.Header.Revision)
		if n := len(resp.Events); n > 0 {
			h.rev = max(h.rev, resp.Events[n-1].Kv.ModRevision)
		}
		h.mu.Unlock()
	}
	return ctx.Err()
}

// resumeEvery is how often the history resumes its watch.
const resumeEvery = 2 * time.Second

// reconnect makes the history connect again, to the members the data dir
// lists now: the cluster was started again, perhaps with other members
// (the client would otherwise keep trying the old ones).
func (h *History) reconnect() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancel != nil {
		h.cancel()
	}
}

func recordedKey(key string) bool {
	for _, p := range recorded {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// catchUp waits until the history has read every revision the storage
// holds now.
func (h *History) catchUp(ctx context.Context, timeout time.Duration) error {
	client, err := datadir.StorageClient(h.dataDir)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := client.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("reading the storage's revision: %w", err)
	}
	want := resp.Header.Revision
	for {
		h.mu.Lock()
		rev, herr := h.rev, h.err
		h.mu.Unlock()
		if herr != nil {
			return herr
		}
		if rev >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the history read up to revision %d of %d: %w", rev, want, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Events returns the changes under prefix, in revision order.
func (h *History) Events(prefix string) []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Event
	for _, e := range h.events {
		if strings.HasPrefix(e.Key, prefix) {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Rev < out[j].Rev })
	return out
}

// Received returns the changes under prefix in the order the watch
// delivered them, across its reconnections: the order the watch checks
// hold to etcd's guarantees.
func (h *History) Received(prefix string) []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Event
	for _, e := range h.events {
		if strings.HasPrefix(e.Key, prefix) {
			out = append(out, e)
		}
	}
	return out
}

// Err is why the history stopped early, if it did.
func (h *History) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Len is how many changes the history holds.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.events)
}
