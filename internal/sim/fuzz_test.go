package sim

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzAnnotations sets arbitrary values on every sim.capstan.dev
// annotation a user may write: each is used as documented or reported as
// invalid (and ignored whole), never half-read, never a negative time.
func FuzzAnnotations(f *testing.F) {
	f.Add("cpu=750m,memory=256Mi", "MemoryPressure", "True", "true", "30", "2.5", "3")
	f.Add("memory=1Gi", "Ready", "False", "", "0", "", "")
	f.Add(" cpu = 1 ", "DiskPressure", "Unknown", "false", "-1", "NaN", "-4")
	f.Add("cpu=1,cpu=2", "Bogus", "true", "yes", "1e300", "+Inf", "99999999999999999999")
	f.Fuzz(func(t *testing.T, load, condType, condStatus, stopped, shutdown, run, boot string) {
		if l, err := ParseLoad(load); err == nil {
			for name, q := range l {
				if name != corev1.ResourceCPU && name != corev1.ResourceMemory {
					t.Fatalf("load %q read resource %s", load, name)
				}
				if q.Sign() < 0 {
					t.Fatalf("load %q read %s=%s", load, name, q.String())
				}
			}
		} else if l != nil {
			t.Fatalf("ParseLoad returned a load with its error %v", err)
		}

		key := ConditionAnnotationPrefix + condType
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{key: condStatus, BootAnnotation: boot}}}
		if stopped != "" {
			node.Annotations[StoppedAnnotation] = stopped
		}
		injected, invalid := InjectedConditions(node), InvalidFaults(node)
		_, isInjected := injected[corev1.NodeConditionType(condType)]
		isInvalid := false
		for _, bad := range invalid {
			if bad.Err == nil {
				t.Fatalf("invalid annotation %s without why", bad.Key)
			}
			isInvalid = isInvalid || bad.Key == key
		}
		if isInjected == isInvalid {
			t.Fatalf("%s=%q is injected %v and invalid %v: want exactly one", key, condStatus, isInjected, isInvalid)
		}
		if Stopped(node) != (stopped == "true") {
			t.Fatalf("stopped %q read as %v", stopped, Stopped(node))
		}
		if Boot(node) < 0 {
			t.Fatalf("boot %q read as %d", boot, Boot(node))
		}

		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{ShutdownSecondsAnnotation: shutdown, RunSecondsAnnotation: run}}}
		if d, ok, err := ShutdownDelay(pod); err == nil && (!ok || d < 0) {
			t.Fatalf("shutdown-seconds %q read as %v (ok %v)", shutdown, d, ok)
		}
		if d, err := RunDuration(pod); d < 0 || (err != nil && d != 0) {
			t.Fatalf("run-seconds %q read as %v, %v", run, d, err)
		}
	})
}
