package differential

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/capstan-dev/capstan/internal/scheduler/algorithm"
	"github.com/capstan-dev/capstan/internal/scheduler/policy"
)

func TestDebugSeed(t *testing.T) {
	seed, err := strconv.ParseUint(os.Getenv("SEED"), 10, 64)
	if err != nil {
		t.Skip()
	}
	c := NewCase(seed)
	up, err := upstreamRun(context.Background(), c)
	fmt.Printf("upstream %+v %v\n", up, err)
	ours, err := capstanRun(context.Background(), c)
	fmt.Printf("capstan %+v %v\n", ours, err)
	fmt.Printf("pod %+v\n", c.Pod.Spec)
	_ = algorithm.Options{}
	_ = policy.Default
}
