package console_test

import (
	"os"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/bench"
)

// The queries bench scale times are the overview's charts.
func TestBenchTimesTheOverviewsCharts(t *testing.T) {
	js, err := os.ReadFile("assets/app.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range bench.ConsoleCharts {
		// app.js writes each query as a JavaScript string literal.
		if !strings.Contains(string(js), `'`+q+`'`) && !strings.Contains(string(js), `"`+q+`"`) {
			t.Errorf("the console's overview has no chart of %s", q)
		}
	}
}
