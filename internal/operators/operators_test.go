package operators

import "testing"

func TestReasonMessage(t *testing.T) {
	for _, tc := range []struct{ in, reason, msg string }{
		{"AdminAckRequired: ack before 4.11", "AdminAckRequired", "ack before 4.11"},
		{"CoreDNSCrashLooping:pods crash", "CoreDNSCrashLooping", "pods crash"},
		{"just a message", "Default", "just a message"},
		{"two words: then a message", "Default", "two words: then a message"},
	} {
		r, m := reasonMessage(tc.in, "Default")
		if r != tc.reason || m != tc.msg {
			t.Errorf("%q: %q %q, want %q %q", tc.in, r, m, tc.reason, tc.msg)
		}
	}
}
