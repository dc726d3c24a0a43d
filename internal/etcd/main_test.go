package etcd_test

import (
	"flag"
	"os"
	"testing"
)

// parallel is how many of this package's tests run at once unless
// -test.parallel says otherwise. Each starts etcd members and then mostly
// waits (etcd takes a membership change only from a leader connected to
// a quorum for five seconds; elections; restarts), so six at a time keep
// about half of two cores busy and finish in a fifth of the time one at a
// time takes. go test's default, GOMAXPROCS, suits tests that compute.
const parallel = "6"

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", parallel); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
