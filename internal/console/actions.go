package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	configclient "github.com/openshift/client-go/config/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/explain"
)

// routeActions adds what only capstan computes or decides, each made
// with the user's own client.
func (s *Server) routeActions() {
	s.mux.HandleFunc("GET /api/capstan/pods/{namespace}/{name}/explain", s.withClients(s.explainPod))
	s.mux.HandleFunc("GET /api/capstan/pending/explain", s.withClients(s.explainPending))
	s.mux.HandleFunc("GET /api/capstan/nodes/explain", s.withClients(s.explainNodes))
	s.mux.HandleFunc("GET /api/capstan/nodes/{name}/drain", s.withClients(s.drainPlan))
	s.mux.HandleFunc("POST /api/capstan/nodes/{name}/drain", s.withClients(s.drainNode))
	s.mux.HandleFunc("GET /api/capstan/nodes/{name}/drain/status", s.withClients(s.drainStatus))
	s.mux.HandleFunc("POST /api/capstan/machinesets/{namespace}/{name}/scale", s.withClients(s.scaleMachineSet))
	s.mux.HandleFunc("POST /api/capstan/clusterversion/channel", s.withClients(s.setChannel))
	s.mux.HandleFunc("POST /api/capstan/clusterversion/update", s.withClients(s.startUpdate))
	s.mux.HandleFunc("GET /api/capstan/clusterversion/status", s.withClients(s.updateStatus))
}

// clients are a user's clients.
type clients struct {
	token  string
	user   string
	cfg    *rest.Config
	kube   kubernetes.Interface
	config configclient.Interface
}

// withClients is withSession for a handler that acts as the user: it
// gets the user's clients.
func (s *Server) withClients(h func(http.ResponseWriter, *http.Request, *clients)) http.HandlerFunc {
	return s.withSession(func(w http.ResponseWriter, r *http.Request, sess *session) {
		cfg := s.userConfig(sess.token)
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "%v", err)
			return
		}
		cc, err := configclient.NewForConfig(cfg)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "%v", err)
			return
		}
		h(w, r, &clients{token: sess.token, user: sess.user, cfg: cfg, kube: kube, config: cc})
	})
}

// pathName checks a name taken from the URL.
func pathName(r *http.Request, key string) (string, error) {
	v := r.PathValue(key)
	if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
		return "", fmt.Errorf("%s %q: %s", key, v, strings.Join(errs, "; "))
	}
	return v, nil
}

type nodeScaleDownJSON struct {
	Group       string   `json:"group,omitempty"`
	Utilization float64  `json:"utilization"`
	Unneeded    bool     `json:"unneeded"`
	Since       string   `json:"since,omitempty"`
	Reason      string   `json:"reason"`
	PodsToMove  []string `json:"podsToMove,omitempty"`
}

type nodesExplanationJSON struct {
	Configured       bool                         `json:"configured"`
	ScaleDownEnabled bool                         `json:"scaleDownEnabled"`
	Threshold        float64                      `json:"threshold,omitempty"`
	Nodes            map[string]nodeScaleDownJSON `json:"nodes"`
}

// explainNodes says why each node stays: one autoscaler simulation per
// user every PendingExplainTTL, however many tabs ask.
func (s *Server) explainNodes(w http.ResponseWriter, r *http.Request, c *clients) {
	s.cached(w, r, "nodes\x00"+c.token, PendingExplainTTL, func(ctx context.Context) (any, error) {
		e, err := explain.Autoscaler(ctx, c.cfg, c.kube, s.opts.Policy)
		if err != nil {
			return nil, err
		}
		return nodesExplanation(e), nil
	})
}

func nodesExplanation(e *autoscaler.Explanation) nodesExplanationJSON {
	out := nodesExplanationJSON{Configured: e.Configured, Nodes: map[string]nodeScaleDownJSON{}}
	if e.Configured && e.ScaleDown != nil {
		out.ScaleDownEnabled, out.Threshold = true, e.Config.UtilizationThreshold
		for name, v := range e.ScaleDown.Verdicts {
			j := nodeScaleDownJSON{Utilization: v.Utilization, Unneeded: v.Unneeded, Reason: v.Reason}
			if v.Group != nil {
				j.Group = v.Group.ID
			}
			if v.Unneeded && !v.Since.IsZero() {
				j.Since = v.Since.UTC().Format(time.RFC3339)
			}
			for _, p := range v.PodsToMove {
				j.PodsToMove = append(j.PodsToMove, p.Namespace+"/"+p.Name)
			}
			out.Nodes[name] = j
		}
	}
	return out
}

// scaleMachineSet sets a MachineSet's replicas through its scale
// subresource. The value is checked before anything is written.
func (s *Server) scaleMachineSet(w http.ResponseWriter, r *http.Request, c *clients) {
	ns, err := pathName(r, "namespace")
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	name, err := pathName(r, "name")
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	var body struct {
		Replicas json.RawMessage `json:"replicas"`
	}
	if err := readJSON(r, &body); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	replicas, err := parseReplicas(body.Replicas)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	dyn, err := dynamic.NewForConfig(c.cfg)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	// Through the scale subresource, as oc scale: machinesets/scale is
	// what RBAC must allow.
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	if _, err := dyn.Resource(machineSets).Namespace(ns).Patch(r.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{}, "scale"); err != nil {
		writeAPIError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": fmt.Sprintf("machineset.machine.openshift.io/%s scaled to %d", name, replicas)})
}

var machineSets = schema.GroupVersionResource{Group: "machine.openshift.io", Version: "v1beta1", Resource: "machinesets"}

// maxReplicas bounds what a page may ask of a MachineSet.
const maxReplicas = 1000

// parseReplicas takes a whole number, as JSON number or string.
func parseReplicas(raw json.RawMessage) (int, error) {
	text := strings.TrimSpace(string(raw))
	if text == "" || text == "null" {
		return 0, fmt.Errorf("replicas is required")
	}
	if unq, err := strconv.Unquote(text); err == nil {
		text = strings.TrimSpace(unq)
	}
	n, err := strconv.Atoi(text)
	if err != nil {
		return 0, fmt.Errorf("replicas %q is not a whole number", text)
	}
	if n < 0 || n > maxReplicas {
		return 0, fmt.Errorf("replicas %d is out of range: from 0 to %d", n, maxReplicas)
	}
	return n, nil
}

// setChannel changes the update channel as `oc adm upgrade channel` does,
// refusing a channel the cluster does not list.
func (s *Server) setChannel(w http.ResponseWriter, r *http.Request, c *clients) {
	var body struct {
		Channel string `json:"channel"`
	}
	if err := readJSON(r, &body); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	cv, err := c.config.ConfigV1().ClusterVersions().Get(r.Context(), cvo.Name, metav1.GetOptions{})
	if err != nil {
		writeAPIError(w, err)
		return
	}
	channel := strings.TrimSpace(body.Channel)
	write, info, warnings, err := cvo.Channel(cv, channel, false)
	if err != nil {
		// oc's message names its flag; the page has none.
		msg := strings.TrimSpace(strings.ReplaceAll(err.Error(), ", you must pass --allow-explicit-channel to continue", ""))
		writeError(w, http.StatusBadRequest, "%s", msg)
		return
	}
	if write {
		patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"channel": channel}})
		if _, err := c.config.ConfigV1().ClusterVersions().Patch(r.Context(), cvo.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			writeAPIError(w, err)
			return
		}
		info = fmt.Sprintf("Channel set to %s", channel)
	}
	writeJSON(w, http.StatusOK, map[string]any{"message": strings.TrimPrefix(info, "info: "), "warnings": warnings})
}

// startUpdate starts an update as `oc adm upgrade --to VERSION` does; a
// conditional update the cluster does not recommend needs acceptRisks,
// as --allow-not-recommended.
func (s *Server) startUpdate(w http.ResponseWriter, r *http.Request, c *clients) {
	var body struct {
		Version     string `json:"version"`
		AcceptRisks bool   `json:"acceptRisks"`
	}
	if err := readJSON(r, &body); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	req := cvo.Request{To: strings.TrimSpace(body.Version), AllowNotRecommended: body.AcceptRisks}
	if req.To == "" {
		writeError(w, http.StatusBadRequest, "a version to update to is required")
		return
	}
	if _, err := cvo.ValidateRequest(req); err != nil {
		writeError(w, http.StatusBadRequest, "%s", strings.ReplaceAll(err.Error(), "--to ", "the version "))
		return
	}
	cv, err := c.config.ConfigV1().ClusterVersions().Get(r.Context(), cvo.Name, metav1.GetOptions{})
	if err != nil {
		writeAPIError(w, err)
		return
	}
	d, err := cvo.Decide(cv, req)
	if err != nil {
		msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), "and to proceed with update use --allow-not-recommended.",
			`and to proceed with the update, check "I accept the risks above".`)
		writeError(w, http.StatusConflict, "%s", msg)
		return
	}
	if d.Update == nil {
		writeJSON(w, http.StatusOK, map[string]any{"message": strings.TrimPrefix(d.Info, "info: ")})
		return
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"desiredUpdate": d.Update}})
	if _, err := c.config.ConfigV1().ClusterVersions().Patch(r.Context(), cvo.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		writeAPIError(w, err)
		return
	}
	var warnings []string
	for _, wn := range d.Warnings {
		warnings = append(warnings, strings.ReplaceAll(strings.TrimPrefix(wn, "warning: "), "with --allow-not-recommended ", ""))
	}
	writeJSON(w, http.StatusOK, map[string]any{"message": "Requested update to " + d.Update.Version, "warnings": warnings})
}

// updateStatus is `oc adm upgrade status --details=all`, read as the
// user.
func (s *Server) updateStatus(w http.ResponseWriter, r *http.Request, c *clients) {
	ctx := r.Context()
	cv, err := c.config.ConfigV1().ClusterVersions().Get(ctx, cvo.Name, metav1.GetOptions{})
	if err != nil {
		writeAPIError(w, err)
		return
	}
	cos, err := c.config.ConfigV1().ClusterOperators().List(ctx, metav1.ListOptions{})
	if err != nil {
		writeAPIError(w, err)
		return
	}
	machines, err := cvo.ReadMachines(ctx, c.kube, c.cfg)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	alerts := func() ([]cvo.StatusAlert, error) { return s.alerts(ctx, c.token) }
	var out bytes.Buffer
	if err := cvo.UpgradeStatus(&out, cv, cos.Items, machines, alerts, time.Now(), "all"); err != nil {
		writeJSON(w, http.StatusOK, map[string]string{"text": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"text": out.String(), "progressing": string(progressingStatus(cv))})
}

func progressingStatus(cv *configv1.ClusterVersion) configv1.ConditionStatus {
	if c := cvo.FindCondition(cv.Status.Conditions, configv1.OperatorProgressing); c != nil {
		return c.Status
	}
	return configv1.ConditionUnknown
}

// alerts reads the firing alerts from the console's Prometheus as the
// user.
func (s *Server) alerts(ctx context.Context, token string) ([]cvo.StatusAlert, error) {
	if s.prom == nil {
		return nil, fmt.Errorf("no Prometheus")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.opts.PrometheusURL+"/api/v1/alerts", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := s.prom.Transport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(buf.String()))
	}
	return cvo.ParseAlerts(buf.Bytes())
}
