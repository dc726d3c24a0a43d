package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestWaitSaysHowFarItIsUntilDone(t *testing.T) {
	done := make(chan struct{})
	calls := 0
	var log bytes.Buffer
	err := waitWithProgress(context.Background(), done, time.Hour, time.Millisecond, &log, func() string {
		calls++
		if calls == 2 {
			close(done)
		}
		return "step " + strings.Repeat("I", calls)
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[0], "] step I") || !strings.HasSuffix(lines[1], "] step II") {
		t.Errorf("progress written:\n%s\nwant a line per tick until done", log.String())
	}
}

func TestWaitEndsSayingWhereItGotTo(t *testing.T) {
	var log bytes.Buffer
	err := waitWithProgress(context.Background(), make(chan struct{}), time.Millisecond, time.Hour, &log, func() string { return "3/5 nodes Ready" })
	if err == nil || err.Error() != "timed out after 1ms at 3/5 nodes Ready" {
		t.Errorf("timeout: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = waitWithProgress(ctx, make(chan struct{}), time.Hour, time.Hour, &log, func() string { return "3/5 nodes Ready" })
	if err == nil || err.Error() != "interrupted at 3/5 nodes Ready" {
		t.Errorf("interruption: %v", err)
	}
}
