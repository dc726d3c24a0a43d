package simulate

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func podOn(key, node string, uid types.UID) *corev1.Pod {
	ns, name, _ := strings.Cut(key, "/")
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid}, Spec: corev1.PodSpec{NodeName: node}}
}

// The calibration finds each way the restored cluster can have drifted
// from the snapshot before the first change: a pod gone, a pending pod
// placed, a pod made, a pod of a name made again (a StatefulSet's, with
// another UID).
func TestTheCalibrationComparesTheRestoredClusterWithTheSnapshot(t *testing.T) {
	restored := map[string]restoredPod{"d/web-1": {"a-1", "u1"}, "d/web-2": {"b-1", "u2"}, "d/gone": {"a-1", "u3"}, "d/wait": {"", "u4"},
		"d/still": {"", "u5"}, "d/sts-0": {"a-1", "u6"}}
	deleting := podOn("d/web-2", "b-1", "u2")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	pods := []*corev1.Pod{podOn("d/web-1", "a-1", "u1"), deleting, podOn("d/wait", "c-1", "u4"), podOn("d/still", "", "u5"),
		podOn("d/sts-0", "a-1", "u7"), podOn("d/web-3", "b-1", "u8"), podOn("d/web-4", "", "u9")}
	c := calibrate(restored, pods, func(n string) string { return n[:1] })
	if c.Pods != 6 || c.Same != 2 || !slices.Equal(c.Gone, []string{"d/gone", "d/sts-0", "d/web-2"}) ||
		!slices.Equal(c.Made, []string{"d/sts-0", "d/web-3", "d/web-4"}) || c.MadePending != 1 ||
		len(c.Placed) != 1 || c.Placed[0] != (PodPlacement{Pod: "d/wait", Node: "c-1", Zone: "c"}) {
		t.Errorf("calibration %+v", c)
	}
	if got, want := c.Line(), "the restored cluster began with 2 of the snapshot's 6 pods where they were; during the restore 3 pods gone, 1 pod pending in the snapshot placed, 3 pods made (1 pending)"; got != want {
		t.Errorf("line %q\nwant %q", got, want)
	}
	same := calibrate(map[string]restoredPod{"d/web-1": {"a-1", "u1"}}, []*corev1.Pod{podOn("d/web-1", "a-1", "u1")}, func(string) string { return "" })
	if got := same.Line(); got != "the restored cluster began as the snapshot: its 1 pod where they were" {
		t.Errorf("line %q", got)
	}
}

// The control run's pending pods, workload by workload, are not the
// changes' doing: the verdict leaves them out, and the report gives the
// changes' effect net of the control's.
func TestTheControlRunIsNettedOut(t *testing.T) {
	changed := &Report{Settled: true, Duration: Duration(5 * time.Minute), Changes: []AppliedChange{{Change: "cordon=a-1"}},
		Removed: []PodRemoval{{Pod: "d/web-1", Workload: "Deployment d/web"}, {Pod: "d/web-2", Workload: "Deployment d/web"}},
		Placed:  []PodPlacement{{Pod: "d/web-5", Workload: "Deployment d/web"}, {Pod: "d/web-6", Workload: "Deployment d/web"}},
		Pending: []PendingPod{{Pod: "d/db-0", Workload: "StatefulSet d/db"}, {Pod: "d/db-1", Workload: "StatefulSet d/db"},
			{Pod: "d/big-0", Workload: "StatefulSet d/big", AlreadyPending: true}},
		NodesNotReady: []NodeChange{{Node: "c-1"}}}
	control := &Report{Duration: Duration(5 * time.Minute),
		Removed:       []PodRemoval{{Pod: "d/web-9", Workload: "Deployment d/web"}},
		Placed:        []PodPlacement{{Pod: "d/web-7", Workload: "Deployment d/web"}},
		Pending:       []PendingPod{{Pod: "d/db-7", Workload: "StatefulSet d/db"}, {Pod: "d/big-0", Workload: "StatefulSet d/big", AlreadyPending: true}},
		NodesNotReady: []NodeChange{{Node: "c-1"}}}
	changed.compare(control)
	c := changed.Control
	if c == nil || c.Net != (NetEffect{Removed: 1, Placed: 1, Pending: 1}) || !c.Large ||
		c.Removed["Deployment d/web"] != 1 || c.Pending["StatefulSet d/db"] != 1 || c.NodesNotReady != 1 {
		t.Fatalf("control %+v", c)
	}
	if !changed.Pending[0].InControl || changed.Pending[1].InControl || changed.Pending[2].InControl {
		t.Errorf("pending %+v: want one db pod, as many as the control left pending, marked", changed.Pending)
	}
	v := changed.verdict()
	if v.Outcome != "FAIL" || !strings.HasPrefix(v.Line, "FAIL: 1 pod pending because of the changes (StatefulSet d/db); ") ||
		!strings.Contains(v.Line, "1 pod pending in the control run too") || !strings.Contains(v.Line, "the control run without the changes diverged too (see Control)") {
		t.Errorf("verdict %+v", v)
	}
	var b bytes.Buffer
	if err := changed.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	want := "Control: the snapshot without the changes, for 5m0s, removed 1 pod (Deployment d/web 1), placed 1 pod, left 1 pod pending (StatefulSet d/db 1), had 1 node NotReady; " +
		"net of it, the changes' pods 1 removed, 1 placed, 1 pending, nodes 0 NotReady, 0 added, 0 removed. The simulation diverges from the snapshot by itself"
	if !strings.Contains(b.String(), want) {
		t.Errorf("the table has no %q:\n%s", want, b.String())
	}

	quiet := &Report{Settled: true, Duration: Duration(time.Minute), Removed: []PodRemoval{{Pod: "d/web-1", Workload: "Deployment d/web"}}}
	quiet.compare(&Report{Duration: Duration(time.Minute)})
	if quiet.Control.Large || quiet.Control.Net != (NetEffect{Removed: 1}) ||
		quiet.Control.line() != "the snapshot without the changes, for 1m0s, changed nothing: what follows is the changes' doing" {
		t.Errorf("a control that did nothing: %+v, %q", quiet.Control, quiet.Control.line())
	}
}
