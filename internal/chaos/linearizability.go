package chaos

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/anishathalye/porcupine"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/capstan-dev/capstan/internal/planted"
)

// Linearizability, as etcd's robustness tests check it: clients create,
// read, compare-and-swap and delete a few objects through the API while
// the campaign kills capstan, and record each operation with its
// invocation and its answer; porcupine then looks for one order of the
// operations, each taking effect at an instant between the two, that a
// single copy of the objects would have answered the same way. A read
// that misses a write acknowledged before it began, a swap that succeeds
// against a version already replaced, a write acknowledged and then gone:
// each has no such order.
//
// An operation whose answer was lost (a timeout, a kill while it was in
// flight) may or may not have taken effect: the model allows both, from
// its invocation to the end of the history. One refused before it reached
// the API server (the connection refused) did not, and is left out.

// linKeys are the objects the clients operate on: ConfigMaps lin-N in the
// campaign's namespace.
const linKeys = 5

// linKeyPrefix is where the API server stores them.
const linKeyPrefix = "/registry/configmaps/" + ackNamespace + "/lin-"

// linStorageKey is where the API server stores object name.
func linStorageKey(name string) string { return "/registry/configmaps/" + ackNamespace + "/" + name }

type linOp string

const (
	linCreate linOp = "create"
	linGet    linOp = "get"
	linUpdate linOp = "update"
	linDelete linOp = "delete"
)

// linInput is an operation as invoked: an update carries the version it
// expects (compare-and-swap).
type linInput struct {
	Op    linOp
	Key   string
	Value string
	RV    string
}

// linResult is how an operation ended.
type linResult string

const (
	linOK       linResult = "ok"
	linNotFound linResult = "not found"
	linExists   linResult = "already exists"
	linConflict linResult = "conflict"
	linUnknown  linResult = "unknown"
)

// linOutput is an operation's answer: the object's value and version
// after a write, as read by a get.
type linOutput struct {
	Result linResult
	Value  string
	RV     string
}

// linState is one object: whether it exists, its value and its version
// ("" unknown: written by an operation whose answer was lost).
type linState struct {
	Exists bool
	Value  string
	RV     string
}

// rvIs tells whether an update expecting version rv applies to s: any
// does when the version is unknown, or when the update expects none (an
// unconditional update, which a ConfigMap allows).
func (s linState) rvIs(rv string) bool { return s.RV == "" || rv == "" || s.RV == rv }

// linModel is a single copy of each object.
var linModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(linInput).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() []any { return []any{linState{}} },
	Step: func(state, input, output any) []any {
		return linStep(state.(linState), input.(linInput), output.(linOutput))
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		return fmt.Sprintf("%s(%s %s %s) -> %s %s %s", in.Op, in.Key, in.Value, in.RV, out.Result, out.Value, out.RV)
	},
	DescribeState: func(state any) string {
		s := state.(linState)
		if !s.Exists {
			return "absent"
		}
		return s.Value + "@" + s.RV
	},
}

// linStep is every state the object can be in after the operation, given
// its answer (none: the answer is impossible from s).
func linStep(s linState, in linInput, out linOutput) []any {
	written := linState{Exists: true, Value: in.Value, RV: out.RV}
	switch in.Op {
	case linCreate:
		switch out.Result {
		case linOK:
			return when(!s.Exists, written)
		case linExists:
			return when(s.Exists, s)
		case linUnknown:
			return append([]any{s}, when(!s.Exists, linState{Exists: true, Value: in.Value})...)
		}
	case linGet:
		switch out.Result {
		case linOK:
			return when(s.Exists && s.Value == out.Value && s.rvIs(out.RV), linState{Exists: true, Value: out.Value, RV: out.RV})
		case linNotFound:
			return when(!s.Exists, s)
		}
	case linUpdate:
		switch out.Result {
		case linOK:
			return when(s.Exists && s.rvIs(in.RV), written)
		case linConflict:
			// A version unknown may be the one expected or not.
			return when(s.Exists && in.RV != "" && (s.RV == "" || s.RV != in.RV), s)
		case linNotFound:
			return when(!s.Exists, s)
		case linUnknown:
			return append([]any{s}, when(s.Exists && s.rvIs(in.RV), linState{Exists: true, Value: in.Value})...)
		}
	case linDelete:
		switch out.Result {
		case linOK:
			return when(s.Exists, linState{})
		case linNotFound:
			return when(!s.Exists, s)
		case linUnknown:
			return append([]any{s}, when(s.Exists, linState{})...)
		}
	}
	return nil
}

func when(ok bool, s linState) []any {
	if !ok {
		return nil
	}
	return []any{s}
}

// linClients run the operations and keep the history.
type linClients struct {
	kube kubernetes.Interface
	// upAs is the process serving the API while capstan is up, nil
	// while it is not: operations are made only while it is up.
	upAs  func() *process
	start time.Time
	// staleReads is the planted bug: a get answered from the client's
	// last read of the object within staleFor, as a read cache that
	// writes never invalidate would.
	staleReads bool

	mu  sync.Mutex
	ops []porcupine.Operation
	// lost are the operations whose answer was lost, still in flight
	// for the model until the end.
	lost []int
}

// linClientCount clients operate at once, each every linInterval.
const (
	linClientCount = 3
	linInterval    = 200 * time.Millisecond
)

func newLinClients(kube kubernetes.Interface, upAs func() *process) *linClients {
	return &linClients{kube: kube, upAs: upAs, start: time.Now(), staleReads: planted.On(planted.StaleReads)}
}

// run operates until ctx ends, each client drawing its operations from
// seed.
func (l *linClients) run(ctx context.Context, seed uint64) {
	var wg sync.WaitGroup
	for id := range linClientCount {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.client(ctx, id, rand.New(rand.NewPCG(seed, uint64(id)+1)))
		}()
	}
	wg.Wait()
}

// staleFor is how long the planted read cache keeps an answer.
const staleFor = time.Second

// cachedRead is an answer the planted read cache keeps.
type cachedRead struct {
	out linOutput
	at  time.Time
}

func (l *linClients) client(ctx context.Context, id int, rng *rand.Rand) {
	seen := map[string]string{} // the last version this client saw of each key
	cache := map[string]cachedRead{}
	t := time.NewTicker(linInterval)
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if l.upAs() == nil {
			continue
		}
		key := fmt.Sprintf("lin-%d", rng.IntN(linKeys))
		in := linInput{Key: key, Value: fmt.Sprintf("c%d-%d", id, n)}
		switch p := rng.IntN(100); {
		case p < 40:
			in.Op = linGet
		case p < 70:
			in.Op, in.RV = linUpdate, seen[key]
		case p < 85:
			in.Op = linCreate
		default:
			in.Op = linDelete
		}
		out := l.record(ctx, id, in, seen, cache)
		// A write taken is read back at once: the read must see it (or
		// what came after), the closest a read can follow a write.
		if out.Result == linOK && in.Op != linGet && ctx.Err() == nil {
			l.record(ctx, id, linInput{Op: linGet, Key: key}, seen, cache)
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// record makes one operation and keeps it in the history, with the
// version it answered in seen.
func (l *linClients) record(ctx context.Context, id int, in linInput, seen map[string]string, cache map[string]cachedRead) linOutput {
	call := time.Since(l.start).Nanoseconds()
	var out linOutput
	var err error
	if c, ok := cache[in.Key]; ok && in.Op == linGet && l.staleReads && time.Since(c.at) < staleFor {
		out = c.out
	} else {
		out, err = l.do(ctx, in)
		if in.Op == linGet && out.Result != linUnknown {
			cache[in.Key] = cachedRead{out, time.Now()}
		}
	}
	ret := time.Since(l.start).Nanoseconds()
	if out.RV != "" {
		seen[in.Key] = out.RV
	}
	if ctx.Err() != nil && out.Result == linUnknown {
		return out // the run ended, not the API
	}
	if errors.Is(err, syscall.ECONNREFUSED) || (in.Op == linGet && out.Result == linUnknown) {
		return out // never reached the API server, or a read that says nothing
	}
	l.mu.Lock()
	if out.Result == linUnknown {
		l.lost = append(l.lost, len(l.ops))
	}
	l.ops = append(l.ops, porcupine.Operation{ClientId: id, Input: in, Call: call, Output: out, Return: ret})
	l.mu.Unlock()
	return out
}

func (l *linClients) do(ctx context.Context, in linInput) (linOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cms := l.kube.CoreV1().ConfigMaps(ackNamespace)
	var cm *corev1.ConfigMap
	var err error
	switch in.Op {
	case linCreate:
		cm, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: in.Key}, Data: map[string]string{"v": in.Value}}, metav1.CreateOptions{})
	case linGet:
		cm, err = cms.Get(ctx, in.Key, metav1.GetOptions{})
	case linUpdate:
		cm, err = cms.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: in.Key, ResourceVersion: in.RV}, Data: map[string]string{"v": in.Value}}, metav1.UpdateOptions{})
	case linDelete:
		err = cms.Delete(ctx, in.Key, metav1.DeleteOptions{})
	}
	switch {
	case err == nil && cm != nil:
		return linOutput{Result: linOK, Value: cm.Data["v"], RV: cm.ResourceVersion}, nil
	case err == nil:
		return linOutput{Result: linOK}, nil
	case apierrors.IsNotFound(err):
		return linOutput{Result: linNotFound}, err
	case apierrors.IsAlreadyExists(err):
		return linOutput{Result: linExists}, err
	case apierrors.IsConflict(err):
		return linOutput{Result: linConflict}, err
	}
	return linOutput{Result: linUnknown}, err
}

// history is the operations, those whose answer was lost returning after
// every other.
func (l *linClients) history() []porcupine.Operation {
	l.mu.Lock()
	defer l.mu.Unlock()
	ops := slices.Clone(l.ops)
	for _, i := range l.lost {
		ops[i].Return = math.MaxInt64
	}
	return ops
}

// linCheckTimeout bounds the search: a history that cannot be decided in
// it is reported as not checked, not as linearizable.
const linCheckTimeout = time.Minute

// checkLinearizable checks the history; when it is not linearizable,
// porcupine's picture of it goes to htmlPath ("" : nowhere).
func checkLinearizable(ops []porcupine.Operation, htmlPath string) []Violation {
	if len(ops) == 0 {
		return []Violation{{"linearizable", "no operation was made: nothing was checked"}}
	}
	model := linModel.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, ops, linCheckTimeout)
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return []Violation{{"linearizable", fmt.Sprintf("%d operations could not be checked within %s", len(ops), linCheckTimeout)}}
	}
	where := ""
	if htmlPath != "" {
		if err := porcupine.VisualizePath(model, info, htmlPath); err == nil {
			where = "; the history is drawn in " + htmlPath
		}
	}
	return []Violation{{"linearizable", fmt.Sprintf("the %d operations have no order a single copy of the objects would have answered the same way: %s%s",
		len(ops), describeIllegal(model, ops), where)}}
}

// describeIllegal names, for each object whose operations have no such
// order, the last operations of the longest order found and the first
// operation it could not go on with.
func describeIllegal(model porcupine.Model, ops []porcupine.Operation) string {
	var out []string
	for _, part := range model.Partition(ops) {
		res, info := porcupine.CheckOperationsVerbose(model, part, linCheckTimeout)
		if res != porcupine.Illegal {
			continue
		}
		key := part[0].Input.(linInput).Key
		var longest []porcupine.Operation
		for _, partials := range info.PartialLinearizationsOperations() {
			for _, seq := range partials {
				if len(seq) > len(longest) {
					longest = seq
				}
			}
		}
		done := map[int64]bool{}
		for _, op := range longest {
			done[op.Call] = true
		}
		var next *porcupine.Operation
		for i := range part {
			if !done[part[i].Call] && (next == nil || part[i].Call < next.Call) {
				next = &part[i]
			}
		}
		var tail []string
		for _, op := range longest[max(0, len(longest)-3):] {
			tail = append(tail, describeOp(op))
		}
		msg := fmt.Sprintf("%s: %d of its %d operations in order (... %s)", key, len(longest), len(part), strings.Join(tail, ", "))
		if next != nil {
			msg += ", then none can be: the first left is " + describeOp(*next)
		}
		out = append(out, msg)
	}
	return strings.Join(out, "; ")
}

func describeOp(op porcupine.Operation) string {
	in, o := op.Input.(linInput), op.Output.(linOutput)
	s := fmt.Sprintf("client %d %s %s", op.ClientId, in.Op, in.Key)
	switch in.Op {
	case linCreate:
		s += " " + in.Value
	case linUpdate:
		s += fmt.Sprintf(" %s if at %s", in.Value, in.RV)
	}
	s += " -> " + string(o.Result)
	if o.Value != "" || o.RV != "" {
		s += fmt.Sprintf(" %s@%s", o.Value, o.RV)
	}
	return fmt.Sprintf("%s [%.3fs..%.3fs]", s, float64(op.Call)/1e9, float64(min(op.Return, math.MaxInt64/2))/1e9)
}

// checkWatch holds the watch the history follows etcd with to etcd's own
// guarantees, as its robustness tests do: events in the order of their
// revisions, none twice, and none missing: every write the clients had
// acknowledged is there, at its revision, with its value, and as many
// deletions as were acknowledged, across every reconnection (each kill
// has the watch resume from the revision after the last it read).
func checkWatch(received []Event, ops []porcupine.Operation) []Violation {
	var out []Violation
	seen := map[string]bool{}
	for i, e := range received {
		id := fmt.Sprintf("%s@%d", e.Key, e.Rev)
		if seen[id] {
			out = append(out, Violation{"watch", fmt.Sprintf("the event of %s at revision %d came twice", e.Key, e.Rev)})
			break
		}
		seen[id] = true
		if i > 0 && e.Rev < received[i-1].Rev {
			out = append(out, Violation{"watch", fmt.Sprintf("the event of %s at revision %d came after that of %s at revision %d",
				e.Key, e.Rev, received[i-1].Key, received[i-1].Rev)})
			break
		}
	}
	puts := map[string]string{}
	deletes := map[string]int{}
	for _, e := range received {
		if cm, ok := e.Obj.(*corev1.ConfigMap); ok {
			puts[fmt.Sprintf("%s@%d", e.Key, e.Rev)] = cm.Data["v"]
		} else if e.Obj == nil {
			deletes[e.Key]++
		}
	}
	var missing []string
	acked := map[string]int{}
	for _, op := range ops {
		in, o := op.Input.(linInput), op.Output.(linOutput)
		if o.Result != linOK {
			continue
		}
		key := linStorageKey(in.Key)
		switch in.Op {
		case linCreate, linUpdate:
			id := key + "@" + o.RV
			v, ok := puts[id]
			switch {
			case !ok:
				missing = append(missing, fmt.Sprintf("the %s of %s to %s at revision %s", in.Op, in.Key, in.Value, o.RV))
			case v != in.Value:
				out = append(out, Violation{"watch", fmt.Sprintf("the event of %s at revision %s says %q, the %s acknowledged wrote %q", in.Key, o.RV, v, in.Op, in.Value)})
			}
		case linDelete:
			acked[key]++
		}
	}
	for key, n := range acked {
		if deletes[key] < n {
			missing = append(missing, fmt.Sprintf("%d of the %d deletions of %s", n-deletes[key], n, path.Base(key)))
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		out = append(out, Violation{"watch", fmt.Sprintf("%d acknowledged writes never came as watch events: %s", len(missing), summarize(missing, 3))})
	}
	return out
}
