package sim

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestInstanceSpecValidate(t *testing.T) {
	good := InstanceSpec{CPU: resource.MustParse("1"), Memory: resource.MustParse("1Gi"), Pods: 10}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid spec: %v", err)
	}
	cases := map[string]func(*InstanceSpec){
		"cpu must be positive":          func(s *InstanceSpec) { s.CPU = resource.Quantity{} },
		"memory must be positive":       func(s *InstanceSpec) { s.Memory = resource.MustParse("-1") },
		"pods must be positive":         func(s *InstanceSpec) { s.Pods = 0 },
		"pod addresses":                 func(s *InstanceSpec) { s.Pods = 5000 },
		"gpu must not be negative":      func(s *InstanceSpec) { s.GPU = -1 },
		"role must be master or worker": func(s *InstanceSpec) { s.Role = "x" },
		`effect "Bad"`:                  func(s *InstanceSpec) { s.Taints = []corev1.Taint{{Key: "k", Effect: "Bad"}} },
	}
	for want, mutate := range cases {
		s := good
		mutate(&s)
		err := s.Validate()
		ie, ok := err.(*InstanceError)
		if !ok || ie.Reason != ReasonInvalidConfiguration || !strings.Contains(ie.Message, want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}

func TestAddressesAreDistinct(t *testing.T) {
	seenIP, seenCIDR := map[string]bool{}, map[string]bool{}
	for i := 0; i < maxInstances; i += 97 {
		ip, cidr := nodeIP(i).String(), podCIDR(i)
		if seenIP[ip] || seenCIDR[cidr.String()] {
			t.Fatalf("index %d reuses %s or %s", i, ip, cidr)
		}
		seenIP[ip], seenCIDR[cidr.String()] = true, true
		if !strings.HasPrefix(cidr.String(), "10.") || cidr.Bits() != 23 {
			t.Fatalf("pod CIDR %s", cidr)
		}
	}
	last := podCIDR(maxInstances - 1)
	if last.Addr().As4()[1] < 128 {
		t.Errorf("last pod CIDR %s left 10.128.0.0/9", last)
	}
}

func TestParseCondition(t *testing.T) {
	ct, st, err := ParseCondition("MemoryPressure=True")
	if err != nil || ct != corev1.NodeMemoryPressure || st != corev1.ConditionTrue {
		t.Errorf("got %s %s %v", ct, st, err)
	}
	for in, want := range map[string]string{
		"MemoryPressure":   "TYPE=STATUS",
		"Foo=True":         "cannot be injected",
		"Ready=Unknown":    "node stop",
		"DiskPressure=yes": "True or False",
	} {
		if _, _, err := ParseCondition(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want error containing %q", in, err, want)
		}
	}
}

func TestNodeStatusReflectsInjectedConditions(t *testing.T) {
	s := &Simulator{}
	s.opts.setDefaults()
	inst := &Instance{Spec: InstanceSpec{Name: "n", CPU: resource.MustParse("2"), Memory: resource.MustParse("4Gi"), Pods: 30, GPU: 1}, InternalIP: "10.0.0.10"}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		ConditionAnnotationPrefix + "MemoryPressure": "True",
	}}}
	st := s.nodeStatus(inst, node, s.opts.Clock.Now())
	got := map[corev1.NodeConditionType]corev1.NodeCondition{}
	for _, c := range st.Conditions {
		got[c.Type] = c
	}
	if c := got[corev1.NodeMemoryPressure]; c.Status != corev1.ConditionTrue || c.Reason != "KubeletHasInsufficientMemory" {
		t.Errorf("MemoryPressure %+v", c)
	}
	if c := got[corev1.NodeReady]; c.Status != corev1.ConditionTrue || c.Reason != "KubeletReady" {
		t.Errorf("Ready %+v", c)
	}
	if len(got) != 5 {
		t.Errorf("%d conditions, want 5", len(got))
	}
	gpu := st.Capacity[ResourceGPU]
	if gpu.Value() != 1 {
		t.Errorf("gpu capacity %v", gpu)
	}
	// A status equal but for heartbeats is not a change.
	later := s.nodeStatus(inst, &corev1.Node{ObjectMeta: node.ObjectMeta, Status: *st}, s.opts.Clock.Now().Add(1e9))
	if !statusEquivalent(st, later) {
		t.Errorf("heartbeat-only difference treated as a change")
	}
}

func TestImageNamesAndSizes(t *testing.T) {
	names := imageNames("registry.example/app:1")
	if len(names) != 2 || !strings.HasPrefix(names[0], "registry.example/app@sha256:") || names[1] != "registry.example/app:1" {
		t.Errorf("names %v", names)
	}
	if got := imageNames("nginx"); got[1] != "nginx:latest" || !strings.HasPrefix(got[0], "nginx@sha256:") {
		t.Errorf("untagged image names %v", got)
	}
	if got := imageNames("host:5000/app"); got[1] != "host:5000/app:latest" {
		t.Errorf("registry with a port: %v", got)
	}
	if got := imageNames("app@sha256:abc"); len(got) != 1 {
		t.Errorf("digest reference: %v", got)
	}
	a, b := ImageSize("registry.example/app:1"), ImageSize("registry.example/app:2")
	if a != ImageSize("registry.example/app:1") || a == b || a < 100<<20 || a >= 1<<30 {
		t.Errorf("sizes %d %d", a, b)
	}
}

// Fault annotations that do not parse are ignored whole, and named.
func TestInvalidFaultsAreIgnoredAndNamed(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		ConditionAnnotationPrefix + "MemoryPressure": "True",
		ConditionAnnotationPrefix + "DiskPressure":   "yes",
		ConditionAnnotationPrefix + "Sleepy":         "True",
		ConditionAnnotationPrefix + "Ready":          "Unknown",
		StoppedAnnotation:                            "1",
	}}}
	got := InjectedConditions(node)
	if len(got) != 1 || got[corev1.NodeMemoryPressure] != corev1.ConditionTrue {
		t.Errorf("injected %v, want only MemoryPressure=True", got)
	}
	var keys []string
	for _, bad := range InvalidFaults(node) {
		keys = append(keys, bad.Key)
		if !strings.Contains(bad.Error(), "ignored") || !strings.Contains(bad.Error(), bad.Value) {
			t.Errorf("message %q", bad.Error())
		}
	}
	want := []string{ConditionAnnotationPrefix + "DiskPressure", ConditionAnnotationPrefix + "Ready", ConditionAnnotationPrefix + "Sleepy", StoppedAnnotation}
	if strings.Join(keys, ",") != strings.Join(want, ",") {
		t.Errorf("invalid %v, want %v", keys, want)
	}
	if Stopped(node) {
		t.Error("a stopped annotation other than \"true\" stopped the kubelet")
	}
}

func TestShutdownDelay(t *testing.T) {
	for v, want := range map[string]any{"2.5": 2500 * time.Millisecond, "0": time.Duration(0), "-1": "0 to 9223372036", "soon": "0 to 9223372036", "NaN": "0 to 9223372036", "+Inf": "0 to 9223372036", "1e300": "0 to 9223372036"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{ShutdownSecondsAnnotation: v}}}
		d, ok, err := ShutdownDelay(pod)
		switch w := want.(type) {
		case time.Duration:
			if err != nil || !ok || d != w {
				t.Errorf("%q: %v %v %v, want %v", v, d, ok, err, w)
			}
		case string:
			if err == nil || ok || !strings.Contains(err.Error(), w) {
				t.Errorf("%q: %v %v %v, want an error", v, d, ok, err)
			}
		}
	}
	if _, ok, err := ShutdownDelay(&corev1.Pod{}); ok || err != nil {
		t.Errorf("no annotation: %v %v", ok, err)
	}
}

func TestContainersRestartAfterAReboot(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "img"}}}}
	t0, t1, t2 := metav1.NewTime(time.Unix(100, 0)), metav1.NewTime(time.Unix(200, 0)), metav1.NewTime(time.Unix(300, 0))
	first := containerStatuses(pod, nil, pod.Spec.Containers, t0, t0, 0, false)
	if first[0].RestartCount != 0 || first[0].State.Running.StartedAt != t0 || first[0].ContainerID != "capstan-sim://u1/app" {
		t.Fatalf("first start: %+v", first[0])
	}
	pod.Status.ContainerStatuses = first
	if !startedInBoot(pod, 0) || startedInBoot(pod, 1) {
		t.Fatal("a container of boot 0 is of boot 0 only")
	}
	// Ready again in the same boot (the node was NotReady a moment): no restart.
	same := containerStatuses(pod, first, pod.Spec.Containers, t0, t1, 0, false)
	if same[0].RestartCount != 0 || same[0].State.Running.StartedAt != t0 {
		t.Fatalf("same boot: %+v", same[0])
	}
	// The node rebooted: restarted once, the old run is its last state.
	after := containerStatuses(pod, first, pod.Spec.Containers, t0, t1, 1, false)
	c := after[0]
	if c.RestartCount != 1 || c.State.Running.StartedAt != t1 || c.LastTerminationState.Terminated == nil ||
		c.LastTerminationState.Terminated.ExitCode != 255 || c.LastTerminationState.Terminated.StartedAt != t0 {
		t.Fatalf("after a reboot: %+v", c)
	}
	pod.Status.ContainerStatuses = after
	if !startedInBoot(pod, 1) {
		t.Fatal("restarted in boot 1")
	}
	// A second reboot counts again.
	again := containerStatuses(pod, after, pod.Spec.Containers, t0, t2, 2, false)
	if again[0].RestartCount != 2 || again[0].LastTerminationState.Terminated.StartedAt != t1 {
		t.Fatalf("second reboot: %+v", again[0])
	}
}
