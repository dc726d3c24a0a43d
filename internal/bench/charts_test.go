package bench

import (
	"os"
	"strings"
	"testing"
)

// The queries bench scale times are the console overview's charts. (Here
// and not in internal/console: a test there importing this package
// would link the whole embedded control plane into the console's test
// binary, which the race detector then builds too.)
func TestBenchTimesTheOverviewsCharts(t *testing.T) {
	js, err := os.ReadFile("../console/assets/app.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range ConsoleCharts {
		// app.js writes each query as a JavaScript string literal.
		if !strings.Contains(string(js), `'`+q+`'`) && !strings.Contains(string(js), `"`+q+`"`) {
			t.Errorf("the console's overview has no chart of %s", q)
		}
	}
}
