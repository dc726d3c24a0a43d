package cvo

import (
	"encoding/json"
	"fmt"
	"time"
)

// StatusAlert is an alert as `oc adm upgrade status` reads it from the
// cluster's Prometheus (/api/v1/alerts through the thanos-querier Route).
type StatusAlert struct {
	Name, Namespace, Severity, Summary string
	ActiveAt                           time.Time
}

// AlertsFunc fetches the cluster's alerts; UpgradeStatus calls it only
// while the cluster updates, as oc does.
type AlertsFunc func() ([]StatusAlert, error)

// ParseAlerts reads a /api/v1/alerts answer.
func ParseAlerts(body []byte) ([]StatusAlert, error) {
	var data struct {
		Status string `json:"status"`
		Data   struct {
			Alerts []struct {
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
				ActiveAt    time.Time         `json:"activeAt"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &data); err != nil {
		return nil, fmt.Errorf("Error unmarshalling alerts: %w", err)
	}
	var out []StatusAlert
	for _, a := range data.Data.Alerts {
		out = append(out, StatusAlert{Name: a.Labels["alertname"], Namespace: a.Labels["namespace"], Severity: a.Labels["severity"],
			Summary: a.Annotations["summary"], ActiveAt: a.ActiveAt})
	}
	return out, nil
}

// alertsAllowedBeforeUpdate are alerts oc shows even when they began
// before the update did.
var alertsAllowedBeforeUpdate = map[string]bool{"PodDisruptionBudgetLimit": true, "PodDisruptionBudgetAtLimit": true}

// alertInsights are the Update Health lines of the alerts that became
// active since the update started, as oc words them.
func alertInsights(alerts []StatusAlert, startedAt time.Time) []insight {
	var out []insight
	for _, a := range alerts {
		if startedAt.After(a.ActiveAt) && !alertsAllowedBeforeUpdate[a.Name] {
			continue
		}
		level := "Info"
		switch a.Severity {
		case "warning":
			level = "Warning"
		case "critical":
			level = "Critical"
		}
		out = append(out, insight{a.ActiveAt, level, "Unknown", "Alert: " + a.Summary})
	}
	return out
}
