package monitoring

import (
	"embed"
	"io/fs"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// ruleFiles are OpenShift's alerting rules for the components capstan
// runs, one file per PrometheusRule object upstream ships, in
// Prometheus's rule file format.
//
//go:embed rules/*.yaml
var ruleFiles embed.FS

// embeddedPrefix names an embedded rule file to the rules manager, which
// knows rule files by name only.
const embeddedPrefix = "capstan:"

var defaultParser = parser.NewParser(parser.Options{})

// ruleFileNames are the embedded rule files, as the rules manager names
// them.
func ruleFileNames() []string {
	names, _ := fs.Glob(ruleFiles, "rules/*.yaml")
	sort.Strings(names)
	for i, n := range names {
		names[i] = embeddedPrefix + n
	}
	return names
}

// RuleFile returns an embedded rule file's content by its base name.
func RuleFile(name string) ([]byte, error) { return ruleFiles.ReadFile("rules/" + name) }

// groupLoader reads the embedded rule files and those on disk, and
// shortens `for` to maxFor when it is set.
type groupLoader struct {
	maxFor time.Duration
	parser parser.Parser
}

func (l *groupLoader) Load(identifier string, ignoreUnknownFields bool, scheme model.ValidationScheme) (*rulefmt.RuleGroups, []error) {
	var (
		content []byte
		err     error
	)
	if name, ok := strings.CutPrefix(identifier, embeddedPrefix); ok {
		content, err = ruleFiles.ReadFile(name)
	} else {
		content, err = os.ReadFile(identifier)
	}
	if err != nil {
		return nil, []error{err}
	}
	groups, errs := rulefmt.Parse(content, ignoreUnknownFields, scheme, l.parser, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		for i, e := range errs {
			errs[i] = &fileError{file: identifier, err: e}
		}
		return nil, errs
	}
	if l.maxFor > 0 {
		for gi := range groups.Groups {
			for ri := range groups.Groups[gi].Rules {
				r := &groups.Groups[gi].Rules[ri]
				if time.Duration(r.For) > l.maxFor {
					r.For = model.Duration(l.maxFor)
				}
			}
		}
	}
	return groups, nil
}

func (l *groupLoader) Parse(query string) (parser.Expr, error) { return l.parser.ParseExpr(query) }

type fileError struct {
	file string
	err  error
}

func (e *fileError) Error() string { return e.file + ": " + e.err.Error() }
func (e *fileError) Unwrap() error { return e.err }
