package cvo

import (
	"bytes"
	"strings"
	"testing"

	configv1 "github.com/openshift/api/config/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	img22 = "quay.io/openshift-release-dev/ocp-release@sha256:2222222222222222222222222222222222222222222222222222222222222222"
	img23 = "quay.io/openshift-release-dev/ocp-release@sha256:e40e49d722cb36a95fa1c03002942b967ccbd7d68de10e003f0baa69abad457b"
	img26 = "quay.io/openshift-release-dev/ocp-release@sha256:e1fa1f513068082d97d78be643c369398b0e6820afab708d26acda2262940954"
	img40 = "quay.io/openshift-release-dev/ocp-release@sha256:300bce8246cf880e792e106607925de0a404484637627edf5f517375517d54a4"
)

// chapterVersion is the chapter's example: 4.10.22 in fast-4.11, two
// recommended updates, 4.11.0 not recommended for RPMOSTreeTimeout.
func chapterVersion() *configv1.ClusterVersion {
	return &configv1.ClusterVersion{
		Spec: configv1.ClusterVersionSpec{Channel: "fast-4.11"},
		Status: configv1.ClusterVersionStatus{
			Desired: configv1.Release{Version: "4.10.22", Image: img22,
				Channels: []string{"candidate-4.10", "candidate-4.11", "eus-4.10", "fast-4.10", "fast-4.11", "stable-4.10"}},
			AvailableUpdates: []configv1.Release{{Version: "4.10.23", Image: img23}, {Version: "4.10.26", Image: img26}},
			ConditionalUpdates: []configv1.ConditionalUpdate{{
				Release: configv1.Release{Version: "4.11.0", Image: img40},
				Conditions: []metav1.Condition{{Type: "Recommended", Status: metav1.ConditionFalse, Reason: "RPMOSTreeTimeout",
					Message: "Nodes with substantial numbers of containers and CPU contention may not reconcile machine configuration https://bugzilla.redhat.com/show_bug.cgi?id=2111817#c22"}},
			}},
			Conditions: []configv1.ClusterOperatorStatusCondition{
				{Type: "Failing", Status: configv1.ConditionFalse},
				{Type: configv1.OperatorProgressing, Status: configv1.ConditionFalse, Message: "Cluster version is 4.10.22"},
				{Type: configv1.RetrievedUpdates, Status: configv1.ConditionTrue},
			},
		},
	}
}

func describe(cv *configv1.ClusterVersion, include bool) (string, string) {
	var out, errOut bytes.Buffer
	Describe(&out, &errOut, cv, include)
	return out.String(), errOut.String()
}

const chapterHead = `Cluster version is 4.10.22

Upstream is unset, so the cluster will use an appropriate default.
Channel: fast-4.11 (available channels: candidate-4.10, candidate-4.11, eus-4.10, fast-4.10, fast-4.11, stable-4.10)

Recommended updates:

  VERSION     IMAGE
  4.10.26     ` + img26 + `
  4.10.23     ` + img23 + `
`

func TestDescribeGolden(t *testing.T) {
	setCond := func(cv *configv1.ClusterVersion, c configv1.ClusterOperatorStatusCondition) {
		for i := range cv.Status.Conditions {
			if cv.Status.Conditions[i].Type == c.Type {
				cv.Status.Conditions[i] = c
				return
			}
		}
		cv.Status.Conditions = append(cv.Status.Conditions, c)
	}
	for _, tc := range []struct {
		name           string
		mutate         func(*configv1.ClusterVersion)
		include        bool
		stdout, stderr string
	}{
		{"the chapter's example", nil, true, chapterHead + `
Updates with known issues:

  Version: 4.11.0
  Image: ` + img40 + `
  Reason: RPMOSTreeTimeout
  Message: Nodes with substantial numbers of containers and CPU contention may not reconcile machine configuration https://bugzilla.redhat.com/show_bug.cgi?id=2111817#c22
`, ""},
		{"without --include-not-recommended", nil, false, chapterHead + `
Additional updates which are not recommended for your cluster configuration are available, to view those re-run the command with --include-not-recommended.
`, ""},
		{"an unknown recommendation", func(cv *configv1.ClusterVersion) {
			cv.Status.ConditionalUpdates[0].Conditions[0].Status = metav1.ConditionUnknown
		}, false, chapterHead + `
Additional updates which are not recommended, or where the recommended status is "Unknown", for your cluster configuration are available, to view those re-run the command with --include-not-recommended.
`, ""},
		{"nothing not recommended", func(cv *configv1.ClusterVersion) {
			cv.Status.ConditionalUpdates = nil
		}, true, chapterHead + `
No updates which are not recommended based on your cluster configuration are available.
`, ""},
		{"no updates", func(cv *configv1.ClusterVersion) {
			cv.Status.AvailableUpdates, cv.Status.ConditionalUpdates = nil, nil
		}, false, `Cluster version is 4.10.22

Upstream is unset, so the cluster will use an appropriate default.
Channel: fast-4.11 (available channels: candidate-4.10, candidate-4.11, eus-4.10, fast-4.10, fast-4.11, stable-4.10)
No updates available. You may still upgrade to a specific release image with --to-image or wait for new updates to be available.
`, ""},
		{"no channel, cannot retrieve", func(cv *configv1.ClusterVersion) {
			cv.Spec.Channel = ""
			cv.Status.AvailableUpdates, cv.Status.ConditionalUpdates = nil, nil
			setCond(cv, configv1.ClusterOperatorStatusCondition{Type: configv1.RetrievedUpdates, Status: configv1.ConditionFalse,
				Reason: "NoChannel", Message: "The update channel has not been configured."})
		}, false, "Cluster version is 4.10.22\n\n", "warning: Cannot display available updates:\n  Reason: NoChannel\n  Message: The update channel has not been configured.\n\n"},
		{"updates known but not refreshed, upstream set", func(cv *configv1.ClusterVersion) {
			cv.Spec.Upstream = "https://updates.example.com/graph"
			cv.Status.ConditionalUpdates = nil
			setCond(cv, configv1.ClusterOperatorStatusCondition{Type: configv1.RetrievedUpdates, Status: configv1.ConditionFalse,
				Reason: "RemoteFailed", Message: "Unable to retrieve available updates: dial tcp: connection refused"})
		}, false, strings.Replace(chapterHead, "Upstream is unset, so the cluster will use an appropriate default.", "Upstream: https://updates.example.com/graph", 1),
			"warning: Cannot refresh available updates:\n  Reason: RemoteFailed\n  Message: Unable to retrieve available updates: dial tcp: connection refused\n\n"},
		{"failing, updating, not upgradeable, release not accepted", func(cv *configv1.ClusterVersion) {
			cv.Status.ConditionalUpdates = nil
			setCond(cv, configv1.ClusterOperatorStatusCondition{Type: "Failing", Status: configv1.ConditionTrue, Reason: "ClusterOperatorDegraded", Message: "Cluster operator etcd is degraded\nsecond line"})
			setCond(cv, configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorProgressing, Status: configv1.ConditionTrue, Message: "Working towards 4.10.23: 106 of 841 done (12% complete)"})
			setCond(cv, configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorUpgradeable, Status: configv1.ConditionFalse, Reason: "AdminAckRequired", Message: "Kubernetes 1.25 removes APIs"})
			setCond(cv, configv1.ClusterOperatorStatusCondition{Type: "ReleaseAccepted", Status: configv1.ConditionFalse, Reason: "RetrievePayload", Message: "Retrieving payload failed"})
		}, false, `Failing=True:

  Reason: ClusterOperatorDegraded
  Message: Cluster operator etcd is degraded
  second line

info: An upgrade is in progress. Working towards 4.10.23: 106 of 841 done (12% complete)

Upgradeable=False

  Reason: AdminAckRequired
  Message: Kubernetes 1.25 removes APIs

ReleaseAccepted=False

  Reason: RetrievePayload
  Message: Retrieving payload failed

` + strings.TrimPrefix(chapterHead, "Cluster version is 4.10.22\n\n"), ""},
		{"no conditions at all", func(cv *configv1.ClusterVersion) {
			cv.Status.Conditions = nil
			cv.Status.ConditionalUpdates = nil
		}, false, "\n" + strings.TrimPrefix(chapterHead, "Cluster version is 4.10.22\n\n"),
			"warning: No current Failing info, see `oc describe clusterversion` for more details.\nwarning: No current Progressing info, see `oc describe clusterversion` for more details.\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cv := chapterVersion()
			if tc.mutate != nil {
				tc.mutate(cv)
			}
			out, errOut := describe(cv, tc.include)
			if out != tc.stdout {
				t.Errorf("stdout:\n%s\nwant:\n%s", out, tc.stdout)
			}
			if errOut != tc.stderr {
				t.Errorf("stderr:\n%q\nwant:\n%q", errOut, tc.stderr)
			}
		})
	}
}

func TestDecideGolden(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mutate   func(*configv1.ClusterVersion)
		req      Request
		update   *configv1.Update
		info     string
		warnings []string
		err      string
	}{
		{name: "--to a recommended version", req: Request{To: "4.10.23"}, update: &configv1.Update{Version: "4.10.23", Image: img23}},
		{name: "--to-image by digest", req: Request{ToImage: "mirror.example.com/ocp/release@sha256:e1fa1f513068082d97d78be643c369398b0e6820afab708d26acda2262940954"},
			update: &configv1.Update{Version: "4.10.26", Image: "mirror.example.com/ocp/release@sha256:e1fa1f513068082d97d78be643c369398b0e6820afab708d26acda2262940954"}},
		{name: "--to-latest", req: Request{ToLatest: true}, update: &configv1.Update{Version: "4.10.26", Image: img26}},
		{name: "--to-latest with --allow-not-recommended", req: Request{ToLatest: true, AllowNotRecommended: true},
			update:   &configv1.Update{Version: "4.11.0", Image: img40},
			warnings: []string{"warning: with --allow-not-recommended you have accepted the risks with 4.11.0 and bypassed Recommended=False RPMOSTreeTimeout: Nodes with substantial numbers of containers and CPU contention may not reconcile machine configuration https://bugzilla.redhat.com/show_bug.cgi?id=2111817#c22"}},
		{name: "--to a conditional update", req: Request{To: "4.11.0"},
			err: "the update 4.11.0 is not one of the recommended updates, but is available as a conditional update. To accept the Recommended=False risk and to proceed with update use --allow-not-recommended.\n  Reason: RPMOSTreeTimeout\n  Message: Nodes with substantial numbers of containers and CPU contention may not reconcile machine configuration https://bugzilla.redhat.com/show_bug.cgi?id=2111817#c22\n"},
		{name: "--to a conditional update, accepted", req: Request{To: "4.11.0", AllowNotRecommended: true, Force: true},
			update: &configv1.Update{Version: "4.11.0", Image: img40, Force: true},
			warnings: []string{"warning: with --allow-not-recommended you have accepted the risks with 4.11.0 and bypassed Recommended=False RPMOSTreeTimeout: Nodes with substantial numbers of containers and CPU contention may not reconcile machine configuration https://bugzilla.redhat.com/show_bug.cgi?id=2111817#c22",
				ForceWarning}},
		{name: "--to the running version", req: Request{To: "4.10.22"}, info: "info: Cluster is already at version 4.10.22"},
		{name: "--to-image the running image", req: Request{ToImage: img22}, info: "info: Cluster is already at " + img22},
		{name: "--to an unknown version", req: Request{To: "4.10.99"},
			err: "the update is not one of the possible targets: 4.10.26, 4.10.23. specify --to-image to continue with the update."},
		{name: "--to-image unknown, explicit", req: Request{ToImage: "example.com/r@sha256:abcd", AllowExplicit: true},
			update:   &configv1.Update{Image: "example.com/r@sha256:abcd"},
			warnings: []string{"warning: The requested upgrade image is not one of the available updates. You have used --allow-explicit-upgrade for the update to proceed anyway"}},
		{name: "--to-image unknown", req: Request{ToImage: "example.com/r@sha256:abcd"},
			err: "the update is not one of the possible targets: 4.10.26, 4.10.23. specify --allow-explicit-upgrade to continue with the update."},
		{name: "no recommended updates", mutate: func(cv *configv1.ClusterVersion) { cv.Status.AvailableUpdates = nil }, req: Request{To: "4.10.23"},
			err: "no recommended updates, specify --to-image to continue with the update or wait for new updates to be available."},
		{name: "no updates at all, allowing not recommended", mutate: func(cv *configv1.ClusterVersion) { cv.Status.AvailableUpdates, cv.Status.ConditionalUpdates = nil, nil },
			req: Request{To: "4.10.23", AllowNotRecommended: true},
			err: "no recommended or conditional updates, specify --to-image to continue with the update or wait for new updates to be available."},
		{name: "--to-latest at the latest", mutate: func(cv *configv1.ClusterVersion) { cv.Status.AvailableUpdates = nil }, req: Request{ToLatest: true},
			info: "info: Cluster is already at the latest available version 4.10.22"},
		{name: "updates cannot be retrieved", mutate: func(cv *configv1.ClusterVersion) {
			cv.Status.AvailableUpdates = nil
			cv.Status.Conditions[2] = configv1.ClusterOperatorStatusCondition{Type: configv1.RetrievedUpdates, Status: configv1.ConditionFalse, Reason: "VersionNotFound",
				Message: `Unable to retrieve available updates: currently reconciling cluster version 4.10.22 not found in the "stable-4.12" channel`}
		}, req: Request{ToLatest: true},
			err: "cannot refresh available updates:\n  Reason: VersionNotFound\n  Message: Unable to retrieve available updates: currently reconciling cluster version 4.10.22 not found in the \"stable-4.12\" channel\n\nspecify --to-image to continue with an update."},
		{name: "already updating", mutate: func(cv *configv1.ClusterVersion) {
			cv.Status.Conditions[1] = configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorProgressing, Status: configv1.ConditionTrue, Message: "Working towards 4.10.23: 10 of 800 done (1% complete)"}
		}, req: Request{To: "4.10.26"},
			err: "the cluster is already upgrading:\n\n  Reason: \n  Message: Working towards 4.10.23: 10 of 800 done (1% complete)\n\nIf you want to upgrade anyway, use --allow-upgrade-with-warnings."},
		{name: "already updating, anyway", mutate: func(cv *configv1.ClusterVersion) {
			cv.Status.Conditions[1] = configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorProgressing, Status: configv1.ConditionTrue, Message: "Working towards 4.10.23"}
			cv.Spec.DesiredUpdate = &configv1.Update{Version: "4.10.23", AcceptRisks: []configv1.AcceptRisk{{Name: "RPMOSTreeTimeout"}}}
		}, req: Request{To: "4.10.26", AllowWithWarnings: true},
			update:   &configv1.Update{Version: "4.10.26", Image: img26, AcceptRisks: []configv1.AcceptRisk{{Name: "RPMOSTreeTimeout"}}},
			warnings: []string{"warning: --allow-upgrade-with-warnings is bypassing: the cluster is already upgrading:\n\n  Reason: \n  Message: Working towards 4.10.23"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cv := chapterVersion()
			if tc.mutate != nil {
				tc.mutate(cv)
			}
			d, err := Decide(cv, tc.req)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error:\n%v\nwant:\n%s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Info != tc.info || strings.Join(d.Warnings, "|") != strings.Join(tc.warnings, "|") {
				t.Errorf("info %q warnings %q, want %q %q", d.Info, d.Warnings, tc.info, tc.warnings)
			}
			switch {
			case tc.update == nil && d.Update != nil:
				t.Errorf("update %+v, want none", d.Update)
			case tc.update != nil && (d.Update == nil || d.Update.Version != tc.update.Version || d.Update.Image != tc.update.Image ||
				d.Update.Force != tc.update.Force || len(d.Update.AcceptRisks) != len(tc.update.AcceptRisks)):
				t.Errorf("update %+v, want %+v", d.Update, tc.update)
			}
		})
	}
}

func TestValidateRequestGolden(t *testing.T) {
	for _, tc := range []struct {
		req      Request
		err      string
		warnings string
	}{
		{Request{To: "4.10", ToImage: ""}, "--to must be a semantic version (e.g. 4.0.1 or 4.1.0-nightly-20181104): No Major.Minor.Patch elements found", ""},
		{Request{To: "4.10.23", ToImage: img23}, "only one of --to or --to-image may be provided", ""},
		{Request{ToImage: "4.0.1"}, "--to-image must be a valid image pull spec: no registry or repository specified", ""},
		{Request{ToImage: "quay.io/ocp/release"}, "--to-image must be a valid image pull spec: no tag or digest specified", ""},
		{Request{ToImage: "quay.io/ocp/release:4.10.23"}, "--to-image must be a by-digest pull spec, unless --force is also set, because release images that are not accessed via digest cannot be verified by the cluster.  Even when --force is set, using tags is not recommended, although we continue to allow it for backwards compatibility", ""},
		{Request{ToImage: "quay.io/ocp/release:4.10.23", Force: true}, "", "warning: Using by-tag pull specs is dangerous, and while we still allow it in combination with --force for backward compatibility, it would be much safer to pass a by-digest pull spec instead"},
		{Request{ToImage: img23}, "", ""},
	} {
		w, err := ValidateRequest(tc.req)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.err || strings.Join(w, "|") != tc.warnings {
			t.Errorf("ValidateRequest(%+v) = %q, %q; want %q, %q", tc.req, got, w, tc.err, tc.warnings)
		}
	}
}

func TestClearAndChannelGolden(t *testing.T) {
	cv := chapterVersion()
	if ok, _, info := Clear(cv); ok || info != "info: No update in progress" {
		t.Errorf("clear without an update: %v %q", ok, info)
	}
	cv.Spec.DesiredUpdate = &configv1.Update{Version: "4.10.23", Image: img23, AcceptRisks: []configv1.AcceptRisk{{Name: "X"}}}
	if ok, repl, _ := Clear(cv); !ok || repl == nil || repl.Version != "" || len(repl.AcceptRisks) != 1 {
		t.Errorf("clear keeps accepted risks: %v %+v", ok, repl)
	}
	if got := Cleared(*cv.Spec.DesiredUpdate, cv.Status.Desired); got != "Cancelled requested upgrade to 4.10.23" {
		t.Errorf("cleared: %q", got)
	}
	if got := Cleared(configv1.Update{Image: img22}, cv.Status.Desired); got != "Cleared the update field, still at 4.10.22" {
		t.Errorf("cleared at the running release: %q", got)
	}
	for _, tc := range []struct {
		channel, current string
		known            []string
		allow            bool
		write            bool
		out, warn, err   string
	}{
		{"fast-4.11", "fast-4.11", nil, false, false, "info: Cluster is already in fast-4.11 (no change)", "", ""},
		{"", "", nil, false, false, "info: Cluster channel is already clear (no change)", "", ""},
		{"stable-4.10", "fast-4.11", []string{"fast-4.11", "stable-4.10"}, false, true, "", "", ""},
		{"stable-4.12", "fast-4.11", []string{"fast-4.11", "stable-4.10"}, false, false, "", "",
			"the requested channel \"stable-4.12\" is not one of the available channels (fast-4.11, stable-4.10), you must pass --allow-explicit-channel to continue\n"},
		{"stable-4.12", "fast-4.11", []string{"fast-4.11", "stable-4.10"}, true, true, "",
			"warning: The requested channel \"stable-4.12\" is not one of the available channels (fast-4.11, stable-4.10). You have used --allow-explicit-channel to proceed anyway. Setting the update channel to \"stable-4.12\".", ""},
		{"", "fast-4.11", []string{"fast-4.11"}, false, false, "", "",
			"You are requesting to clear the update channel. The current channel \"fast-4.11\" is one of the available channels, you must pass --allow-explicit-channel to continue\n"},
		{"", "fast-4.11", []string{"fast-4.11"}, true, true, "", "warning: Clearing channel \"fast-4.11\"; cluster will no longer request available update recommendations.", ""},
		{"fast-4.11", "", nil, false, true, "", "warning: No channels known to be compatible with the current version \"4.10.22\"; unable to validate \"fast-4.11\". Setting the update channel to \"fast-4.11\" anyway.", ""},
	} {
		cv := chapterVersion()
		cv.Spec.Channel, cv.Status.Desired.Channels = tc.current, tc.known
		write, info, warnings, err := Channel(cv, tc.channel, tc.allow)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if write != tc.write || info != tc.out || strings.Join(warnings, "|") != tc.warn || gotErr != tc.err {
			t.Errorf("channel %q from %q: %v %q %q %q; want %v %q %q %q", tc.channel, tc.current, write, info, warnings, gotErr, tc.write, tc.out, tc.warn, tc.err)
		}
	}
}
