package chaos

import (
	"fmt"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
)

// intent is a setting the campaign made as a user would (a pool's
// maxUnavailable, a MachineSet's replicas): each write once, with the
// revision etcd gave it. No controller may change what a user set: the
// user-intent invariant holds each revision of the object to the value
// of the campaign's last write at or before it.
type intent struct {
	key   string
	field string
	// read reads the field from a stored object.
	read func(runtime.Object) string

	mu     sync.Mutex
	writes []intentWrite
}

type intentWrite struct {
	rev   int64
	value string
}

// intents are a run's intents by key and field.
type intents struct {
	mu  sync.Mutex
	all []*intent
}

// wrote records that the campaign set the field of key to value, in the
// write etcd made at revision resourceVersion.
func (is *intents) wrote(key, field, value, resourceVersion string, read func(runtime.Object) string) error {
	rev, err := strconv.ParseInt(resourceVersion, 10, 64)
	if err != nil {
		return fmt.Errorf("the write of %s %s answered resourceVersion %q, not a revision", key, field, resourceVersion)
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	var in *intent
	for _, i := range is.all {
		if i.key == key && i.field == field {
			in = i
		}
	}
	if in == nil {
		in = &intent{key: key, field: field, read: read}
		is.all = append(is.all, in)
	}
	in.mu.Lock()
	in.writes = append(in.writes, intentWrite{rev: rev, value: value})
	in.mu.Unlock()
	return nil
}

// check holds every recorded revision of each intent's object, from the
// campaign's first write on, to the value of its last write then. An
// intent never written, or whose write the history does not hold, is a
// violation too: there would be nothing to check.
func (is *intents) check(h *History, want ...string) []Violation {
	is.mu.Lock()
	defer is.mu.Unlock()
	var out []Violation
	for _, key := range want {
		if !slicesHas(is.all, key) {
			out = append(out, Violation{"user intent", fmt.Sprintf("the campaign never recorded its write of %s", key)})
		}
	}
	for _, in := range is.all {
		in.mu.Lock()
		writes := append([]intentWrite(nil), in.writes...)
		in.mu.Unlock()
		seen := false
		for _, e := range h.Events(in.key) {
			if e.Key != in.key {
				continue
			}
			var wantValue string
			found := false
			for _, w := range writes {
				if w.rev <= e.Rev {
					wantValue, found = w.value, true
				}
			}
			if !found {
				continue
			}
			if e.Rev == writes[0].rev {
				seen = true
			}
			if e.Obj == nil {
				out = append(out, Violation{"user intent", fmt.Sprintf("%s, whose %s the campaign set to %s, was deleted at revision %d", in.key, in.field, wantValue, e.Rev)})
				break
			}
			if got := in.read(e.Obj); got != wantValue {
				out = append(out, Violation{"user intent", fmt.Sprintf("%s %s is %s at revision %d: the campaign set it to %s, and nobody else may change it",
					in.key, in.field, got, e.Rev, wantValue)})
				break
			}
		}
		if !seen {
			out = append(out, Violation{"user intent", fmt.Sprintf("the history holds no revision %d of %s: the campaign's write of its %s is not there to check from", writes[0].rev, in.key, in.field)})
		}
	}
	return out
}

// has reports whether the campaign recorded a write of the field of key.
func (is *intents) has(key, field string) bool {
	is.mu.Lock()
	defer is.mu.Unlock()
	for _, i := range is.all {
		if i.key == key && i.field == field {
			return true
		}
	}
	return false
}

func slicesHas(all []*intent, key string) bool {
	for _, i := range all {
		if i.key == key {
			return true
		}
	}
	return false
}

// span is the revision of the campaign's first write of value to the
// field of key, and of its first write of next after that (0: none).
func (is *intents) span(key, field, value, next string) (from, to int64) {
	is.mu.Lock()
	defer is.mu.Unlock()
	for _, in := range is.all {
		if in.key != key || in.field != field {
			continue
		}
		in.mu.Lock()
		for _, w := range in.writes {
			switch {
			case from == 0 && w.value == value:
				from = w.rev
			case from != 0 && to == 0 && w.value == next:
				to = w.rev
			}
		}
		in.mu.Unlock()
	}
	return from, to
}
