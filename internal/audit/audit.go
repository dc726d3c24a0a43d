// Package audit reads the API server's audit log back: who did what, and
// whether the authorizer refused it.
package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Event is the part of an audit event capstan reads back.
type Event struct {
	Verb string `json:"verb"`
	User struct {
		Username string              `json:"username"`
		Groups   []string            `json:"groups"`
		Extra    map[string][]string `json:"extra"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
	} `json:"objectRef"`
	RequestURI     string `json:"requestURI"`
	ResponseStatus *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"responseStatus"`
	Annotations map[string]string `json:"annotations"`
}

// AuthorizationDenied tells whether the authorizer refused the request
// (rather than admission, such as a terminating namespace's, which
// answers 403 too).
func (e *Event) AuthorizationDenied() bool {
	return e.Annotations["authorization.k8s.io/decision"] == "forbid"
}

// What describes the request: verb, resource and where.
func (e *Event) What() string {
	if e.ObjectRef == nil {
		return e.Verb + " " + e.RequestURI
	}
	r := e.ObjectRef.Resource
	if e.ObjectRef.Subresource != "" {
		r += "/" + e.ObjectRef.Subresource
	}
	if e.ObjectRef.APIGroup != "" {
		r += "." + e.ObjectRef.APIGroup
	}
	where := ""
	if e.ObjectRef.Namespace != "" {
		where = " in " + e.ObjectRef.Namespace
	}
	return e.Verb + " " + r + where
}

// Read calls fn with every event of the audit log at path and its
// rotated backups, oldest first.
func Read(path string, fn func(*Event)) error {
	backups, _ := filepath.Glob(strings.TrimSuffix(path, ".log") + "-*.log")
	sort.Strings(backups)
	for _, f := range append(backups, path) {
		if err := readAuditFile(f, fn); err != nil {
			return err
		}
	}
	return nil
}

// eventStart begins every line of the apiserver's JSON audit log.
var eventStart = []byte(`{"kind":"Event","apiVersion":"audit.k8s.io/v1"`)

func readAuditFile(path string, fn func(*Event)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	// A last line that does not parse was cut short by a kill of the
	// apiserver mid-write (a SIGKILL stops a write at a page boundary).
	// The next start appends its first event to the cut line: that event
	// is read from where it begins. Any other line that does not parse
	// is an error.
	var bad error
	for n := 1; sc.Scan(); n++ {
		if bad != nil {
			return bad
		}
		var e Event
		line := sc.Bytes()
		if err := json.Unmarshal(line, &e); err != nil {
			i := bytes.LastIndex(line, eventStart)
			if i <= 0 || json.Unmarshal(line[i:], &e) != nil {
				bad = fmt.Errorf("%s:%d: %w", path, n, err)
				continue
			}
		}
		fn(&e)
	}
	return sc.Err()
}
