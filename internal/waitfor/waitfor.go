// Package waitfor is capstan's one way to wait for something observable:
// poll a condition that says, while it does not hold, why not, and fail
// with that explanation when the time is up.
package waitfor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
)

// Condition reports whether what is awaited holds; when it does not, why
// says what it saw instead. A non-nil error stops the wait at once.
type Condition func(ctx context.Context) (done bool, why string, err error)

// TimeoutError is the failure of a wait that ran out of time.
type TimeoutError struct {
	Timeout time.Duration
	// Why is the condition's last explanation.
	Why string
}

func (e *TimeoutError) Error() string {
	if e.Why == "" {
		return fmt.Sprintf("not met within %s", e.Timeout)
	}
	return fmt.Sprintf("not met within %s: %s", e.Timeout, e.Why)
}

// Poll checks cond at once and then every interval until it holds, it
// fails, ctx ends or timeout passes.
func Poll(ctx context.Context, interval, timeout time.Duration, cond Condition) error {
	var why string
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		done, w, err := cond(ctx)
		why = w
		return done, err
	})
	if err == nil {
		return nil
	}
	if wait.Interrupted(err) && ctx.Err() == nil {
		return &TimeoutError{Timeout: timeout, Why: why}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if why != "" {
			return fmt.Errorf("%w (last seen: %s)", err, why)
		}
	}
	return err
}

// Simple adapts a condition that cannot fail.
func Simple(cond func(ctx context.Context) (bool, string)) Condition {
	return func(ctx context.Context) (bool, string, error) {
		ok, why := cond(ctx)
		return ok, why, nil
	}
}

// Informed runs inf until it has synced, then checks cond against what
// its cache holds every interval, as Poll does, and stops inf. Where Poll
// with a List would fetch every object at every check, this reads the
// objects once and then only their changes, which is what a wait over
// thousands of nodes or machines can afford.
func Informed(ctx context.Context, inf cache.SharedIndexInformer, interval, timeout time.Duration, cond func(objs []any) (bool, string)) error {
	stop := make(chan struct{})
	defer close(stop)
	go inf.Run(stop)
	start := time.Now()
	synced := func(ctx context.Context) (bool, string, error) {
		return inf.HasSynced(), "the informer has not synced", nil
	}
	if err := Poll(ctx, 20*time.Millisecond, timeout, synced); err != nil {
		return err
	}
	return Poll(ctx, interval, max(timeout-time.Since(start), time.Millisecond), Simple(func(context.Context) (bool, string) {
		return cond(inf.GetStore().List())
	}))
}
