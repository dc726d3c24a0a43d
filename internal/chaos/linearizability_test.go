package chaos

import (
	"math"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// op is one recorded operation: client, [call, ret], input and answer.
func op(client int, call, ret int64, in linInput, out linOutput) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: in, Output: out}
}

func create(key, v string) linInput          { return linInput{Op: linCreate, Key: key, Value: v} }
func get(key string) linInput                { return linInput{Op: linGet, Key: key} }
func update(key, v, rv string) linInput      { return linInput{Op: linUpdate, Key: key, Value: v, RV: rv} }
func del(key string) linInput                { return linInput{Op: linDelete, Key: key} }
func ok(v, rv string) linOutput              { return linOutput{Result: linOK, Value: v, RV: rv} }
func result(r linResult) linOutput           { return linOutput{Result: r} }
func lost(in linInput) (linInput, linOutput) { return in, result(linUnknown) }
func opLost(client int, call int64, in linInput) porcupine.Operation {
	i, o := lost(in)
	return op(client, call, math.MaxInt64, i, o)
}

// Histories a single copy of the objects could have answered are
// linearizable; each kind of anomaly a storage or a client can show is
// not, and is named.
func TestLinearizability(t *testing.T) {
	cases := map[string]struct {
		ops  []porcupine.Operation
		want string // "" linearizable, else in the violation
	}{
		"sequential": {[]porcupine.Operation{
			op(0, 0, 1, create("a", "x"), ok("x", "10")),
			op(1, 2, 3, get("a"), ok("x", "10")),
			op(0, 4, 5, update("a", "y", "10"), ok("y", "11")),
			op(1, 6, 7, update("a", "z", "10"), result(linConflict)),
			op(1, 8, 9, del("a"), ok("", "")),
			op(0, 10, 11, get("a"), result(linNotFound)),
		}, ""},
		"concurrent, either order": {[]porcupine.Operation{
			op(0, 0, 1, create("a", "x"), ok("x", "10")),
			op(0, 2, 6, update("a", "y", "10"), ok("y", "11")),
			op(1, 3, 4, get("a"), ok("x", "10")),
			op(2, 3, 5, get("a"), ok("y", "11")),
		}, ""},
		"an answer lost, the write taken": {[]porcupine.Operation{
			op(0, 0, 1, create("a", "x"), ok("x", "10")),
			opLost(0, 2, update("a", "y", "10")),
			op(1, 5, 6, get("a"), ok("y", "12")),
			op(1, 7, 8, update("a", "z", "12"), ok("z", "13")),
		}, ""},
		"an answer lost, the write not taken": {[]porcupine.Operation{
			op(0, 0, 1, create("a", "x"), ok("x", "10")),
			opLost(0, 2, del("a")),
			op(1, 5, 6, get("a"), ok("x", "10")),
		}, ""},
		"unconditional updates": {[]porcupine.Operation{
			op(0, 0, 1, create("a", "x"), ok("x", "10")),
			op(1, 2, 3, update("a", "y", ""), ok("y", "11")),
			op(0, 4, 5, update("a", "z", ""), ok("z", "12")),
			op(1, 6, 7, get("a"), ok("z", "12")),
		}, ""},
		"an unconditional update of nothing": {[]porcupine.Operation{
			op(1, 2, 3, update("a", "y", ""), result(linNotFound)),
		}, ""},
		"a stale read": {[]porcupine.Operation{
			op(0, 0, 1, create("a", "x"), ok("x", "10")),
			op(0, 2, 3, update("a", "y", "10"), ok("y", "11")),
			op(1, 4, 5, get("a"), ok("x", "10")),
		}, "a: 2 of its 3 operations in order"},
		"a swap against a replaced version": {[]porcupine.Operation{
			op(0, 0, 1, create("a", "x"), ok("x", "10")),
			op(0, 2, 3, update("a", "y", "10"), ok("y", "11")),
			op(1, 4, 5, update("a", "z", "10"), ok("z", "12")),
		}, "the first left is client 1 update a z if at 10 -> ok z@12"},
		"an acknowledged write gone": {[]porcupine.Operation{
			op(0, 0, 1, create("a", "x"), ok("x", "10")),
			op(1, 2, 3, get("a"), result(linNotFound)),
		}, "client 1 get a -> not found"},
		"one object wrong among others": {[]porcupine.Operation{
			op(0, 0, 1, create("b", "x"), ok("x", "10")),
			op(0, 0, 1, create("a", "x"), ok("x", "11")),
			op(1, 2, 3, create("a", "w"), ok("w", "12")),
		}, "a: 1 of its 2"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := checkLinearizable(tc.ops, "")
			switch {
			case tc.want == "" && len(got) > 0:
				t.Fatalf("violations %v, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0].Detail, tc.want)):
				t.Fatalf("violations %v, want one naming %q", got, tc.want)
			}
		})
	}
	if got := checkLinearizable(nil, ""); len(got) != 1 || !strings.Contains(got[0].Detail, "nothing was checked") {
		t.Errorf("an empty history: %v", got)
	}
}

func cmEvent(key string, rev int64, v string) Event {
	e := Event{Key: linStorageKey(key), Rev: rev}
	if v != "" {
		e.Obj = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: key}, Data: map[string]string{"v": v}}
	}
	return e
}

// The watch is held to etcd's guarantees: order, no duplicate, nothing
// acknowledged missing, and the values written.
func TestWatchChecks(t *testing.T) {
	ops := []porcupine.Operation{
		op(0, 0, 1, create("a", "x"), ok("x", "10")),
		op(0, 2, 3, update("a", "y", "10"), ok("y", "12")),
		op(1, 4, 5, del("a"), ok("", "")),
		op(1, 6, 7, update("b", "q", "3"), result(linConflict)),
	}
	good := []Event{cmEvent("a", 10, "x"), cmEvent("b", 11, "p"), cmEvent("a", 12, "y"), cmEvent("a", 13, "")}
	cases := map[string]struct {
		received []Event
		want     string
	}{
		"as etcd sends them": {good, ""},
		"out of order":       {[]Event{good[0], good[2], good[1], good[3]}, "at revision 11 came after"},
		"twice":              {[]Event{good[0], good[1], good[1], good[2], good[3]}, "came twice"},
		"a write missing":    {[]Event{good[0], good[1], good[3]}, "1 acknowledged writes never came as watch events: the update of a to y at revision 12"},
		"a deletion missing": {good[:3], "1 of the 1 deletions of a"},
		"another value":      {[]Event{good[0], good[1], cmEvent("a", 12, "z"), good[3]}, `says "z"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := checkWatch(tc.received, ops)
			switch {
			case tc.want == "" && len(got) > 0:
				t.Fatalf("violations %v, want none", got)
			case tc.want != "" && (len(got) == 0 || !strings.Contains(got[0].Detail, tc.want)):
				t.Fatalf("violations %v, want one naming %q", got, tc.want)
			}
		})
	}
}
