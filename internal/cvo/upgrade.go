package cvo

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/blang/semver/v4"
	configv1 "github.com/openshift/api/config/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What `oc adm upgrade` prints, and decides, from a ClusterVersion.

// ForceWarning is printed whenever --force is used.
const ForceWarning = "warning: --force overrides cluster verification of your supplied release image and waives any update precondition failures. Only use this if you are testing unsigned release images or you are working around a known bug in the cluster-version operator and you have verified the authenticity of the provided image yourself."

// FindCondition returns the condition of type t, or nil.
func FindCondition(conds []configv1.ClusterOperatorStatusCondition, t configv1.ClusterStatusConditionType) *configv1.ClusterOperatorStatusCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// indent continues a multi-line message under its label.
func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n  ") }

func notRecommended(cu configv1.ConditionalUpdate) *metav1.Condition {
	if c := meta.FindStatusCondition(cu.Conditions, RecommendedCondition); c != nil && c.Status != metav1.ConditionTrue {
		return c
	}
	return nil
}

// Describe prints the cluster's version, channel and updates (oc adm
// upgrade with no target).
func Describe(out, errOut io.Writer, cv *configv1.ClusterVersion, includeNotRecommended bool) {
	if c := FindCondition(cv.Status.Conditions, "Failing"); c != nil {
		if c.Status != configv1.ConditionFalse {
			fmt.Fprintf(out, "%s=%s:\n\n  Reason: %s\n  Message: %s\n\n", c.Type, c.Status, c.Reason, indent(c.Message))
		}
	} else {
		fmt.Fprintf(errOut, "warning: No current %s info, see `oc describe clusterversion` for more details.\n", "Failing")
	}
	if c := FindCondition(cv.Status.Conditions, configv1.OperatorProgressing); c != nil && c.Message != "" {
		if c.Status == configv1.ConditionTrue {
			fmt.Fprintf(out, "info: An upgrade is in progress. %s\n", c.Message)
		} else {
			fmt.Fprintln(out, c.Message)
		}
	} else {
		fmt.Fprintf(errOut, "warning: No current %s info, see `oc describe clusterversion` for more details.\n", configv1.OperatorProgressing)
	}
	fmt.Fprintln(out)
	if c := FindCondition(cv.Status.Conditions, configv1.OperatorUpgradeable); c != nil && c.Status == configv1.ConditionFalse {
		fmt.Fprintf(out, "%s=%s\n\n  Reason: %s\n  Message: %s\n\n", c.Type, c.Status, c.Reason, indent(c.Message))
	}
	if c := FindCondition(cv.Status.Conditions, "ReleaseAccepted"); c != nil && c.Status != configv1.ConditionTrue {
		fmt.Fprintf(out, "ReleaseAccepted=%s\n\n  Reason: %s\n  Message: %s\n\n", c.Status, c.Reason, indent(c.Message))
	}
	if cv.Spec.Channel != "" {
		if cv.Spec.Upstream == "" {
			fmt.Fprint(out, "Upstream is unset, so the cluster will use an appropriate default.\n")
		} else {
			fmt.Fprintf(out, "Upstream: %s\n", cv.Spec.Upstream)
		}
		if len(cv.Status.Desired.Channels) > 0 {
			fmt.Fprintf(out, "Channel: %s (available channels: %s)\n", cv.Spec.Channel, strings.Join(cv.Status.Desired.Channels, ", "))
		} else {
			fmt.Fprintf(out, "Channel: %s\n", cv.Spec.Channel)
		}
	}
	retrieved := FindCondition(cv.Status.Conditions, configv1.RetrievedUpdates)
	if len(cv.Status.AvailableUpdates) > 0 {
		fmt.Fprintf(out, "\nRecommended updates:\n\n")
		w := tabwriter.NewWriter(out, 14, 2, 1, ' ', 0)
		fmt.Fprintf(w, "  VERSION\tIMAGE\n")
		updates := append([]configv1.Release(nil), cv.Status.AvailableUpdates...)
		sortReleases(updates)
		for _, u := range updates {
			fmt.Fprintf(w, "  %s\t%s\n", u.Version, u.Image)
		}
		w.Flush()
		if retrieved != nil && retrieved.Status == configv1.ConditionFalse {
			fmt.Fprintf(errOut, "warning: Cannot refresh available updates:\n  Reason: %s\n  Message: %s\n\n", retrieved.Reason, indent(retrieved.Message))
		}
	} else if retrieved != nil && retrieved.Status == configv1.ConditionFalse {
		fmt.Fprintf(errOut, "warning: Cannot display available updates:\n  Reason: %s\n  Message: %s\n\n", retrieved.Reason, indent(retrieved.Message))
	} else {
		fmt.Fprintf(out, "No updates available. You may still upgrade to a specific release image with --to-image or wait for new updates to be available.\n")
	}
	conditional := append([]configv1.ConditionalUpdate(nil), cv.Status.ConditionalUpdates...)
	sort.SliceStable(conditional, func(i, j int) bool {
		return versionGreater(conditional[i].Release.Version, conditional[j].Release.Version)
	})
	anyRisky := false
	qualifier := ""
	for _, cu := range conditional {
		if c := notRecommended(cu); c != nil {
			anyRisky = true
			if c.Status != metav1.ConditionFalse && qualifier == "" {
				qualifier = fmt.Sprintf(", or where the recommended status is %q,", c.Status)
			}
		}
	}
	switch {
	case includeNotRecommended && anyRisky:
		fmt.Fprintf(out, "\nUpdates with known issues:\n")
		for _, cu := range conditional {
			if c := notRecommended(cu); c != nil {
				fmt.Fprintf(out, "\n  Version: %s\n  Image: %s\n", cu.Release.Version, cu.Release.Image)
				fmt.Fprintf(out, "  Reason: %s\n  Message: %s\n", c.Reason, indent(strings.TrimSpace(c.Message)))
			}
		}
	case includeNotRecommended:
		fmt.Fprintf(out, "\nNo updates which are not recommended based on your cluster configuration are available.\n")
	case anyRisky:
		fmt.Fprintf(out, "\nAdditional updates which are not recommended%s for your cluster configuration are available, to view those re-run the command with --include-not-recommended.\n", qualifier)
	}
}

// Request is what a target flag of oc adm upgrade asks for.
type Request struct {
	To, ToImage                                           string
	ToLatest                                              bool
	AllowNotRecommended, AllowExplicit, AllowWithWarnings bool
	Force                                                 bool
}

// Decision is the outcome of a target request: an update to write, or
// an informational line (nothing to do). Warnings go to stderr.
type Decision struct {
	Update   *configv1.Update
	Info     string
	Warnings []string
}

// ValidateRequest checks the flags as oc does before it reads anything.
func ValidateRequest(r Request) (warnings []string, err error) {
	if r.To != "" && r.ToImage != "" {
		return nil, errors.New("only one of --to or --to-image may be provided")
	}
	if r.To != "" {
		if _, err := semver.Parse(r.To); err != nil {
			return nil, fmt.Errorf("--to must be a semantic version (e.g. 4.0.1 or 4.1.0-nightly-20181104): %v", err)
		}
	}
	if r.ToImage != "" {
		ref := parsePullSpec(r.ToImage)
		switch {
		case ref.err != nil:
			return nil, fmt.Errorf("--to-image must be a valid image pull spec: %v", ref.err)
		case !ref.hasRegistryOrNamespace:
			return nil, errors.New("--to-image must be a valid image pull spec: no registry or repository specified")
		case ref.id == "" && ref.tag == "":
			return nil, errors.New("--to-image must be a valid image pull spec: no tag or digest specified")
		case ref.tag != "" && !r.Force:
			return nil, errors.New("--to-image must be a by-digest pull spec, unless --force is also set, because release images that are not accessed via digest cannot be verified by the cluster.  Even when --force is set, using tags is not recommended, although we continue to allow it for backwards compatibility")
		case ref.tag != "":
			warnings = append(warnings, "warning: Using by-tag pull specs is dangerous, and while we still allow it in combination with --force for backward compatibility, it would be much safer to pass a by-digest pull spec instead")
		}
	}
	return warnings, nil
}

// pullSpec is an image reference split as oc splits it.
type pullSpec struct {
	hasRegistryOrNamespace bool
	tag, id                string
	err                    error
}

func parsePullSpec(s string) pullSpec {
	var p pullSpec
	name := s
	if before, id, ok := strings.Cut(s, "@"); ok {
		name, p.id = before, id
		if !strings.Contains(id, ":") || strings.HasSuffix(id, ":") {
			p.err = fmt.Errorf("invalid digest %q", id)
			return p
		}
	}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name, p.tag = name[:i], name[i+1:]
	}
	if name == "" || strings.ContainsAny(name, " \t") {
		p.err = errors.New("invalid reference format")
		return p
	}
	p.hasRegistryOrNamespace = strings.Contains(name, "/")
	return p
}

// matches reports whether a release is the requested target: the same
// version, the same pull spec, or the same digest.
func matches(r configv1.Release, to, toImage string) bool {
	if to != "" && r.Version == to {
		return true
	}
	if toImage == "" {
		return false
	}
	if r.Image == toImage {
		return true
	}
	want := parsePullSpec(toImage)
	return want.id != "" && parsePullSpec(r.Image).id == want.id
}

// Decide picks the update a --to, --to-image or --to-latest request
// writes, with oc's messages for every way it can fail.
func Decide(cv *configv1.ClusterVersion, r Request) (*Decision, error) {
	d := &Decision{}
	if r.To != "" && r.To == cv.Status.Desired.Version {
		d.Info = "info: Cluster is already at version " + r.To
		return d, nil
	}
	if r.ToImage != "" && r.ToImage == cv.Status.Desired.Image {
		d.Info = "info: Cluster is already at " + r.ToImage
		return d, nil
	}
	var possible []configv1.Release
	risky := map[string]metav1.Condition{}
	for _, a := range cv.Status.AvailableUpdates {
		if matches(a, r.To, r.ToImage) {
			image := a.Image
			if r.ToImage != "" {
				image = r.ToImage
			}
			d.Update = &configv1.Update{Version: a.Version, Image: image}
			break
		}
		possible = append(possible, a)
	}
	if d.Update == nil {
		for _, cu := range cv.Status.ConditionalUpdates {
			c := notRecommended(cu)
			if c == nil {
				continue
			}
			if matches(cu.Release, r.To, r.ToImage) {
				if !r.AllowNotRecommended {
					return nil, fmt.Errorf("the update %s is not one of the recommended updates, but is available as a conditional update. To accept the %s=%s risk and to proceed with update use --allow-not-recommended.\n  Reason: %s\n  Message: %s\n",
						cu.Release.Version, c.Type, c.Status, c.Reason, indent(c.Message))
				}
				d.Update = &configv1.Update{Version: cu.Release.Version, Image: cu.Release.Image}
				d.Warnings = append(d.Warnings, fmt.Sprintf("warning: with --allow-not-recommended you have accepted the risks with %s and bypassed %s=%s %s: %s",
					cu.Release.Version, c.Type, c.Status, c.Reason, c.Message))
				break
			}
			if r.AllowNotRecommended {
				possible = append(possible, cu.Release)
				risky[cu.Release.Image] = *c
			}
		}
	}
	if d.Update == nil && r.ToImage != "" && r.AllowExplicit {
		d.Update = &configv1.Update{Image: r.ToImage}
		d.Warnings = append(d.Warnings, "warning: The requested upgrade image is not one of the available updates. You have used --allow-explicit-upgrade for the update to proceed anyway")
	}
	sortReleases(possible)
	if r.ToLatest && len(possible) > 0 {
		d.Update = &configv1.Update{Version: possible[0].Version, Image: possible[0].Image}
		if c, ok := risky[d.Update.Image]; ok {
			d.Warnings = append(d.Warnings, fmt.Sprintf("warning: with --allow-not-recommended you have accepted the risks with %s and bypassed %s=%s %s: %s",
				d.Update.Version, c.Type, c.Status, c.Reason, c.Message))
		}
	}
	if d.Update == nil {
		option, article := "--to-image", "the"
		if r.ToImage != "" {
			option = "--allow-explicit-upgrade"
		}
		if r.ToLatest {
			article = "an"
		}
		next := fmt.Sprintf("%s to continue with %s update", option, article)
		c := FindCondition(cv.Status.Conditions, configv1.RetrievedUpdates)
		switch {
		case c != nil && c.Status != configv1.ConditionTrue:
			return nil, fmt.Errorf("cannot refresh available updates:\n  Reason: %s\n  Message: %s\n\nspecify %s.", c.Reason, indent(c.Message), next)
		case len(possible) == 0 && r.AllowNotRecommended:
			return nil, fmt.Errorf("no recommended or conditional updates, specify %s or wait for new updates to be available.", next)
		case len(possible) == 0 && r.ToLatest:
			d.Info = "info: Cluster is already at the latest available version " + cv.Status.Desired.Version
			return d, nil
		case len(possible) == 0:
			return nil, fmt.Errorf("no recommended updates, specify %s or wait for new updates to be available.", next)
		default:
			versions := make([]string, len(possible))
			for i, p := range possible {
				versions[i] = p.Version
			}
			return nil, fmt.Errorf("the update is not one of the possible targets: %s. specify %s.", strings.Join(versions, ", "), next)
		}
	}
	if r.Force {
		d.Update.Force = true
		d.Warnings = append(d.Warnings, ForceWarning)
	}
	if err := checkForUpgrade(cv); err != nil {
		if !r.AllowWithWarnings {
			return nil, fmt.Errorf("%s\n\nIf you want to upgrade anyway, use --allow-upgrade-with-warnings.", err)
		}
		d.Warnings = append(d.Warnings, "warning: --allow-upgrade-with-warnings is bypassing: "+err.Error())
	}
	if cv.Spec.DesiredUpdate != nil {
		d.Update.AcceptRisks = cv.Spec.DesiredUpdate.AcceptRisks
	}
	return d, nil
}

// checkForUpgrade is oc's client-side guard: an invalid, failing or
// already updating cluster.
func checkForUpgrade(cv *configv1.ClusterVersion) error {
	var problems []string
	if c := FindCondition(cv.Status.Conditions, "Invalid"); c != nil && c.Status == configv1.ConditionTrue {
		problems = append(problems, fmt.Sprintf("the cluster version object is invalid, you must correct the invalid state first:\n\n  Reason: %s\n  Message: %s", c.Reason, indent(c.Message)))
	}
	if c := FindCondition(cv.Status.Conditions, "Failing"); c != nil && c.Status == configv1.ConditionTrue {
		target := cv.Status.Desired.Version
		if target == "" {
			target = cv.Status.Desired.Image
		}
		if target == "" {
			target = "ClusterVersion status.desired has neither a version nor image; please open a bug"
		}
		problems = append(problems, fmt.Sprintf("the cluster is experiencing an error reconciling %q:\n\n  Reason: %s\n  Message: %s", target, c.Reason, indent(c.Message)))
	}
	if c := FindCondition(cv.Status.Conditions, configv1.OperatorProgressing); c != nil && c.Status == configv1.ConditionTrue {
		problems = append(problems, fmt.Sprintf("the cluster is already upgrading:\n\n  Reason: %s\n  Message: %s", c.Reason, indent(c.Message)))
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(problems, "\n\n"))
}

// Clear says what --clear writes (nil: nothing to clear) and prints.
func Clear(cv *configv1.ClusterVersion) (clear bool, replacement *configv1.Update, info string) {
	if cv.Spec.DesiredUpdate == nil {
		return false, nil, "info: No update in progress"
	}
	if cv.Spec.DesiredUpdate.AcceptRisks != nil {
		replacement = &configv1.Update{AcceptRisks: cv.Spec.DesiredUpdate.AcceptRisks}
	}
	return true, replacement, ""
}

// Cleared is the line after a --clear: the update was the running
// release, or it was cancelled.
func Cleared(original configv1.Update, desired configv1.Release) string {
	same := false
	switch {
	case original.Image != "" && desired.Image != "":
		same = original.Image == desired.Image
	case original.Version != "" && desired.Version != "":
		same = original.Version == desired.Version
	}
	if same {
		return "Cleared the update field, still at " + versionOrImage(desired.Version, desired.Image)
	}
	return "Cancelled requested upgrade to " + versionOrImage(original.Version, original.Image)
}

// versionOrImage names a release by its version, else its image.
func versionOrImage(version, image string) string {
	switch {
	case version != "":
		return version
	case image != "":
		return image
	}
	return "<unknown>"
}

// Channel decides a `oc adm upgrade channel` request: whether to write
// the channel, what to print and what to warn.
func Channel(cv *configv1.ClusterVersion, channel string, allowExplicit bool) (write bool, info string, warnings []string, err error) {
	current := cv.Spec.Channel
	if channel == current {
		if channel == "" {
			return false, "info: Cluster channel is already clear (no change)", nil, nil
		}
		return false, fmt.Sprintf("info: Cluster is already in %s (no change)", channel), nil, nil
	}
	known := cv.Status.Desired.Channels
	if len(known) > 0 {
		found, currentKnown := false, false
		for _, k := range known {
			found = found || k == channel
			currentKnown = currentKnown || k == current
		}
		switch {
		case channel == "" && currentKnown && !allowExplicit:
			return false, "", nil, fmt.Errorf("You are requesting to clear the update channel. The current channel %q is one of the available channels, you must pass --allow-explicit-channel to continue\n", current)
		case channel != "" && !found && !allowExplicit:
			return false, "", nil, fmt.Errorf("the requested channel %q is not one of the available channels (%s), you must pass --allow-explicit-channel to continue\n", channel, strings.Join(known, ", "))
		case channel != "" && !found:
			warnings = append(warnings, fmt.Sprintf("warning: The requested channel %q is not one of the available channels (%s). You have used --allow-explicit-channel to proceed anyway. Setting the update channel to %q.", channel, strings.Join(known, ", "), channel))
		}
	} else if channel != "" {
		warnings = append(warnings, fmt.Sprintf("warning: No channels known to be compatible with the current version %q; unable to validate %q. Setting the update channel to %q anyway.", cv.Status.Desired.Version, channel, channel))
	}
	if channel == "" {
		warnings = append(warnings, fmt.Sprintf("warning: Clearing channel %q; cluster will no longer request available update recommendations.", current))
	}
	return true, "", warnings, nil
}
