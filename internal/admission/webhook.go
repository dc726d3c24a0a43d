package admission

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

var metav1CreateOptions = metav1.CreateOptions{}

// Names of what capstan registers for PodNodeConstraints.
const (
	PodNodeConstraintsWebhookName = "podnodeconstraints.scheduling.openshift.io"
	PodNodeConstraintsPath        = "/validate-podnodeconstraints"
	maxRequestBytes               = 3 << 20
)

// Reviewer decides admission requests: allowed, or the message saying
// why not; an error is a failure to decide.
type Reviewer interface {
	Review(ctx context.Context, req *admissionv1.AdmissionRequest) (allowed bool, message string, err error)
}

// Server serves admission webhooks over TLS.
type Server struct {
	listener net.Listener
	srv      *http.Server
}

// NewServer serves each reviewer at its path on listener with the given
// certificate.
func NewServer(listener net.Listener, cert tls.Certificate, reviewers map[string]Reviewer) *Server {
	s := &Server{listener: listener}
	mux := http.NewServeMux()
	for path, r := range reviewers {
		mux.HandleFunc(path, func(w http.ResponseWriter, req *http.Request) { serveReview(w, req, r) })
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	s.srv = &http.Server{
		Handler:           mux,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	return s
}

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(shutdown)
	}()
	err := s.srv.ServeTLS(s.listener, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func serveReview(w http.ResponseWriter, r *http.Request, reviewer Reviewer) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	review := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(body, review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	req := review.Request
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	allowed, msg, err := reviewer.Review(r.Context(), req)
	switch {
	case err != nil:
		klog.FromContext(r.Context()).Error(err, "Admission review failed", "path", r.URL.Path, "namespace", req.Namespace, "name", req.Name)
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInternalServerError, Reason: metav1.StatusReasonInternalError, Message: err.Error()}
	case !allowed:
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: msg}
	}
	out := &admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// WebhookConfiguration describes the registration of PodNodeConstraints;
// clientConfig says where the apiserver reaches the webhook.
func WebhookConfiguration(clientConfig admissionregistrationv1.WebhookClientConfig) *admissionregistrationv1.ValidatingWebhookConfiguration {
	rule := func(group string, resources ...string) admissionregistrationv1.RuleWithOperations {
		return admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{"*"}, Resources: resources,
				Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
		}
	}
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: PodNodeConstraintsWebhookName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         PodNodeConstraintsWebhookName,
			ClientConfig: clientConfig,
			Rules: []admissionregistrationv1.RuleWithOperations{
				rule("", "pods", "podtemplates", "replicationcontrollers"),
				rule("apps", "deployments", "replicasets", "statefulsets"),
				rule("batch", "jobs", "cronjobs"),
			},
			// Members of system:masters hold every permission, pods/binding
			// included: the answer is known without asking.
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "not-system-masters",
				Expression: "!('system:masters' in request.userInfo.groups)",
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](10),
		}},
	}
}

// Register creates or updates the webhook configuration.
func Register(ctx context.Context, client kubernetes.Interface, cfg *admissionregistrationv1.ValidatingWebhookConfiguration) error {
	api := client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	existing, err := api.Get(ctx, cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = api.Create(ctx, cfg, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	cfg.ResourceVersion = existing.ResourceVersion
	_, err = api.Update(ctx, cfg, metav1.UpdateOptions{})
	return err
}
