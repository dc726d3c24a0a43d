package compat

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

// ReasonFieldNotHonoured is the Warning event capstan records on an object
// that sets a field it does not honour.
const ReasonFieldNotHonoured = "FieldNotHonoured"

// SetFields are the reported fields of Fields that obj (an object of kind,
// typed or unstructured) sets: present and not empty.
func SetFields(kind string, obj any) ([]NotHonoured, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	var out []NotHonoured
	for _, f := range Fields {
		if f.Kind == kind && f.Report && set(m, strings.Split(f.Path, ".")) {
			out = append(out, f)
		}
	}
	return out, nil
}

// set reports whether the path (steps; "x[]" steps into a list's items)
// leads to a value that is not empty.
func set(v any, path []string) bool {
	if len(path) == 0 {
		switch v := v.(type) {
		case nil:
			return false
		case string:
			return v != ""
		case map[string]any:
			return len(v) > 0
		case []any:
			return len(v) > 0
		}
		return true
	}
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	step, list := strings.CutSuffix(path[0], "[]")
	next := m[step]
	if !list {
		return set(next, path[1:])
	}
	items, _ := next.([]any)
	for _, it := range items {
		if set(it, path[1:]) {
			return true
		}
	}
	return false
}

// Reporter records, once per object and generation, a Warning event for
// each field it sets that capstan does not honour.
type Reporter struct {
	mu   sync.Mutex
	done map[string]bool
}

// Report checks obj, of kind, with generation and uid identifying the
// spec it is at, and records the events with rec.
func (r *Reporter) Report(rec record.EventRecorder, kind string, obj runtime.Object, uid types.UID, generation int64) {
	if rec == nil {
		return
	}
	fields, err := SetFields(kind, obj)
	if err != nil || len(fields) == 0 {
		return
	}
	key := fmt.Sprintf("%s/%d", uid, generation)
	r.mu.Lock()
	if r.done == nil {
		r.done = map[string]bool{}
	}
	seen := r.done[key]
	r.done[key] = true
	r.mu.Unlock()
	if seen {
		return
	}
	for _, f := range fields {
		rec.Eventf(obj, corev1.EventTypeWarning, ReasonFieldNotHonoured, "%s is not honoured by capstan: %s", f.Path, f.Instead)
	}
}
