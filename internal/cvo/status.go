package cvo

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	configv1 "github.com/openshift/api/config/v1"
)

// StatusDetails are the sections `adm upgrade status --details` adds.
var StatusDetails = []string{"none", "all", "nodes", "health", "operators"}

// UpgradeStatus prints the progress of an update in the shape of
// `oc adm upgrade status`: the control plane's assessment, completion
// and operators, its nodes, the worker pools and their nodes (m, when the
// Machine Config Operator runs), and the update's health. An update whose
// control plane is done is still shown while a worker pool rolls.
// Alerts (nil: none asked) gives the firing and pending alerts; those that
// became active since the update started are Update Health insights.
func UpgradeStatus(w io.Writer, cv *configv1.ClusterVersion, cos []configv1.ClusterOperator, m *Machines, alerts AlertsFunc, now time.Time, details string) error {
	if !validDetails(details) {
		return fmt.Errorf("invalid value for --details: %s (must be one of %s)", details, strings.Join(StatusDetails, ", "))
	}
	progressing := FindCondition(cv.Status.Conditions, configv1.OperatorProgressing)
	if progressing == nil {
		return fmt.Errorf("no current Progressing info, see `oc describe clusterversion` for more details")
	}
	pools, insights := poolViews(cv, m, now)
	var master *poolView
	var workers []poolView
	workersOutdated := false
	for i := range pools {
		if pools[i].master {
			master = &pools[i]
			continue
		}
		workers = append(workers, pools[i])
		workersOutdated = workersOutdated || (len(pools[i].nodes) > 0 && pools[i].completion != 100)
	}
	if progressing.Status != configv1.ConditionTrue && !workersOutdated {
		fmt.Fprintln(w, "The cluster is not updating.")
		return nil
	}
	if alerts != nil {
		startedAt := progressing.LastTransitionTime.Time
		if len(cv.Status.History) > 0 {
			startedAt = cv.Status.History[0].StartedTime.Time
		}
		// As oc: a failure to fetch is said, and the rest goes on.
		if list, err := alerts(); err != nil {
			fmt.Fprintln(w, "Unable to fetch alerts, ignoring alerts in 'Update Health': ", err)
		} else {
			insights = append(insights, alertInsights(list, startedAt)...)
		}
	}
	target := cv.Status.Desired.Version
	var platform []configv1.ClusterOperator
	for _, co := range cos {
		for a := range co.Annotations {
			if strings.HasPrefix(a, "include.release.openshift.io/") || strings.HasPrefix(a, "exclude.release.openshift.io/") {
				platform = append(platform, co)
				break
			}
		}
	}
	if len(platform) == 0 {
		return fmt.Errorf("no cluster operator information available - you must be connected to an OpenShift version 4 server")
	}
	sort.Slice(platform, func(i, j int) bool { return platform[i].Name < platform[j].Name })
	var updated, updating, waiting, healthy, unavailable, degraded int
	var updatingNames []string
	type row struct{ name, since, reason, message string }
	var rows []row
	for _, co := range platform {
		isUpdated := false
		for _, v := range co.Status.Versions {
			isUpdated = isUpdated || (v.Name == "operator" && v.Version == target)
		}
		avail := FindCondition(co.Status.Conditions, configv1.OperatorAvailable)
		prog := FindCondition(co.Status.Conditions, configv1.OperatorProgressing)
		deg := FindCondition(co.Status.Conditions, configv1.OperatorDegraded)
		switch {
		case isUpdated:
			updated++
		case prog != nil && prog.Status == configv1.ConditionTrue:
			updating++
			updatingNames = append(updatingNames, co.Name)
			rows = append(rows, row{co.Name, shortDuration(now.Sub(prog.LastTransitionTime.Time)), ellipsize(prog.Reason, 20), prog.Message})
		default:
			waiting++
		}
		switch {
		case avail == nil || avail.Status != configv1.ConditionTrue:
			unavailable++
			since := now
			if avail != nil {
				since = avail.LastTransitionTime.Time
			}
			if level := levelAfter(now.Sub(since), 5*time.Minute, 20*time.Minute); level != "" {
				reason := ""
				if avail != nil {
					reason = avail.Reason
				}
				insights = append(insights, insight{since, level, "API Availability", fmt.Sprintf("Cluster Operator %s is unavailable (%s)", co.Name, reason)})
			}
		case deg != nil && deg.Status == configv1.ConditionTrue:
			degraded++
			if level := levelAfter(now.Sub(deg.LastTransitionTime.Time), 5*time.Minute, 40*time.Minute); level != "" {
				insights = append(insights, insight{deg.LastTransitionTime.Time, level, "API Availability", fmt.Sprintf("Cluster Operator %s is degraded (%s)", co.Name, deg.Reason)})
			}
		default:
			healthy++
		}
	}
	var started time.Time
	if len(cv.Status.History) > 0 {
		started = cv.Status.History[0].StartedTime.Time
	}
	elapsed := now.Sub(started)

	fmt.Fprintln(w, "= Control Plane =")
	if updated == len(platform) {
		h := cv.Status.History[0]
		end := now
		if h.CompletionTime != nil {
			end = h.CompletionTime.Time
		}
		fmt.Fprintf(w, "Update to %s successfully completed at %s (duration: %s)\n", target, end.UTC().Format(time.RFC3339), shortDuration(end.Sub(started)))
	} else {
		baseline := previousUpdateDuration(cv.Status.History)
		remaining := baseline - elapsed
		assessment, est := "Progressing", vagueUnder(remaining)
		switch {
		case remaining < -10*time.Minute:
			assessment, est = "Stalled", "N/A; estimate duration was "+shortDuration(baseline)
		case remaining < 0 && elapsed > 5*time.Minute:
			// Slower than the last update, and not just starting.
			assessment = "Progressing - Slow"
		}
		fmt.Fprintf(w, "Assessment:      %s\n", assessment)
		fmt.Fprintf(w, "Target Version:  %s\n", targetVersion(cv))
		if len(updatingNames) > 0 {
			fmt.Fprintf(w, "Updating:        %s\n", strings.Join(updatingNames, ", "))
		}
		fmt.Fprintf(w, "Completion:      %d%% (%d operators updated, %d updating, %d waiting)\n", updated*100/len(platform), updated, updating, waiting)
		fmt.Fprintf(w, "Duration:        %s (Est. Time Remaining: %s)\n", shortDuration(elapsed), est)
		health := []string{fmt.Sprintf("%d Healthy", healthy)}
		if unavailable > 0 {
			health = append(health, fmt.Sprintf("%d Unavailable", unavailable))
		}
		if degraded > 0 {
			health = append(health, fmt.Sprintf("%d Available but degraded", degraded))
		}
		fmt.Fprintf(w, "Operator Health: %s\n", strings.Join(health, ", "))
		if (details == "operators" || details == "all") && len(rows) > 0 {
			fmt.Fprintln(w, "\nUpdating Cluster Operators")
			tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSINCE\tREASON\tMESSAGE")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.name, r.since, r.reason, r.message)
			}
			tw.Flush()
		}
	}
	nodes := details == "nodes" || details == "all"
	if master != nil {
		writeNodes(w, *master, nodes)
	}
	if len(workers) > 0 {
		fmt.Fprintln(w, "\n= Worker Upgrade =")
		writePools(w, workers)
		for _, p := range workers {
			writeNodes(w, p, nodes)
		}
	}

	if c := FindCondition(cv.Status.Conditions, Failing); c == nil {
		insights = append(insights, insight{now, "Warning", "Update Stalled", "Cluster Version version has no Failing condition"})
	} else if c.Status != configv1.ConditionFalse {
		verb := "is failing"
		if c.Status == configv1.ConditionUnknown {
			verb = "may be failing"
		}
		insights = append(insights, insight{c.LastTransitionTime.Time, "Warning", "Update Stalled", fmt.Sprintf("Cluster Version version %s to proceed with the update (%s)", verb, c.Reason)})
	}
	if len(cv.Status.History) > 1 && cv.Status.History[1].State == configv1.PartialUpdate {
		last := ""
		for _, h := range cv.Status.History[1:] {
			if h.State == configv1.CompletedUpdate {
				last = h.Version
				break
			}
		}
		insights = append(insights, insight{started, "Warning", "None", fmt.Sprintf("Previous update to %s never completed, last complete update was %s", cv.Status.History[1].Version, last)})
	}
	fmt.Fprintln(w, "\n= Update Health =")
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "SINCE\tLEVEL\tIMPACT\tMESSAGE")
	if len(insights) == 0 {
		fmt.Fprintln(tw, "-\tInfo\tNone\tUpdate is proceeding well")
	}
	sort.SliceStable(insights, func(i, j int) bool { return insights[i].since.Before(insights[j].since) })
	for _, in := range insights {
		since := "-"
		if !in.since.IsZero() {
			since = shortDuration(now.Sub(in.since))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", since, in.level, in.impact, in.message)
	}
	tw.Flush()
	return nil
}

type insight struct {
	since                  time.Time
	level, impact, message string
}

func validDetails(d string) bool {
	for _, v := range StatusDetails {
		if d == v {
			return true
		}
	}
	return false
}

// levelAfter is Warning after warn, Error after fail, "" before.
func levelAfter(d, warn, fail time.Duration) string {
	switch {
	case d > fail:
		return "Error"
	case d > warn:
		return "Warning"
	}
	return ""
}

// targetVersion words where the update goes from.
func targetVersion(cv *configv1.ClusterVersion) string {
	target := cv.Status.Desired.Version
	h := cv.Status.History
	if len(h) < 2 {
		return target + " (a new install)"
	}
	if h[1].State == configv1.PartialUpdate {
		return fmt.Sprintf("%s (from incomplete %s)", target, h[1].Version)
	}
	return fmt.Sprintf("%s (from %s)", target, h[1].Version)
}

// previousUpdateDuration is how long the last completed update took (not
// the install), an hour when there is none.
func previousUpdateDuration(h []configv1.UpdateHistory) time.Duration {
	for i := 1; i < len(h)-1; i++ {
		if h[i].State == configv1.CompletedUpdate && h[i].CompletionTime != nil {
			return h[i].CompletionTime.Sub(h[i].StartedTime.Time)
		}
	}
	return time.Hour
}

// vagueUnder words an estimate as oc does: "<10m" below ten minutes.
func vagueUnder(d time.Duration) string {
	if d < 10*time.Minute {
		return "<10m"
	}
	return shortDuration(d)
}

// shortDuration rounds to the minute above ten minutes, to the second
// below, and drops zero units ("59m", "1m29s").
func shortDuration(d time.Duration) string {
	if d > 10*time.Minute {
		d = d.Round(time.Minute)
	} else {
		d = d.Round(time.Second)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func ellipsize(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
