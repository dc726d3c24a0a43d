package operators

import (
	"strings"
	"testing"
	"unicode"
)

// FuzzReasonMessage splits arbitrary operator fault annotations
// ("Reason: message"): the reason is always one word a condition can
// carry, and nothing of the value is lost.
func FuzzReasonMessage(f *testing.F) {
	for _, seed := range []string{"OperandCrashLoop: the operand restarts", "plain message", ": no reason", "Two Words: x", "A:b:c", "", "\u2003: em space"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		reason, msg := reasonMessage(v, "Degraded")
		if reason == "" || strings.ContainsFunc(reason, unicode.IsSpace) {
			t.Fatalf("%q gave reason %q", v, reason)
		}
		if !strings.Contains(v, msg) {
			t.Fatalf("%q gave message %q", v, msg)
		}
	})
}
