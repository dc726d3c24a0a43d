package cvo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	promconfig "github.com/prometheus/common/config"
	"regexp"
	"strings"
	"sync"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
)

// Recommended condition reasons.
const (
	ReasonNotExposedToRisks = "NotExposedToRisks"
	ReasonEvaluationFailed  = "EvaluationFailed"
	ReasonMultipleReasons   = "MultipleReasons"
	// ReasonExposedToRisks stands for a risk whose name is not a valid
	// condition reason.
	ReasonExposedToRisks = "ExposedToRisks"
	// RecommendedCondition is the condition type on a conditional update.
	RecommendedCondition = "Recommended"
)

var conditionReason = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// Cache timings of PromQL evaluation (the CVO's): one query at most every
// MinBetweenMatches across all, each result kept MinForCondition before it
// is asked again, and forgotten after Expiration.
const (
	MinBetweenMatches = time.Second
	MinForCondition   = time.Hour
	Expiration        = 24 * time.Hour
)

// Evaluator decides whether a cluster is exposed to risks.
type Evaluator struct {
	// PromQLURL is a Prometheus-compatible query endpoint; empty, every
	// PromQL rule fails to evaluate.
	PromQLURL string
	// HTTP is how the endpoint is reached: its CA, a bearer token (a
	// thanos-querier asks for both), as a Prometheus scrape is
	// configured.
	HTTP  promconfig.HTTPClientConfig
	Clock clock.Clock

	mu        sync.Mutex
	lastQuery time.Time
	cache     map[string]*cached
}

type cached struct {
	match     bool
	err       error
	evaluated time.Time
	requested time.Time
}

// Match walks a risk's rules in order; the first that evaluates decides.
// When none evaluates the result is an error.
func (e *Evaluator) Match(ctx context.Context, rules []configv1.ClusterCondition) (bool, error) {
	var errs []error
	for _, r := range rules {
		switch r.Type {
		case "Always":
			return true, nil
		case "PromQL":
			if r.PromQL == nil {
				continue
			}
			match, err := e.promQL(ctx, r.PromQL.PromQL)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			return match, nil
		}
	}
	if len(errs) == 0 {
		return false, errors.New("no recognized cluster condition types")
	}
	return false, errors.Join(errs...)
}

// promQL evaluates a query through the cache: a fresh result is reused,
// and at most one query a second leaves for the endpoint.
func (e *Evaluator) promQL(ctx context.Context, query string) (bool, error) {
	now := e.Clock.Now()
	key, _ := json.Marshal(query)
	e.mu.Lock()
	if e.cache == nil {
		e.cache = map[string]*cached{}
	}
	for k, c := range e.cache {
		if now.Sub(c.evaluated) > Expiration && now.Sub(c.requested) > Expiration {
			delete(e.cache, k)
		}
	}
	c := e.cache[string(key)]
	if c == nil {
		c = &cached{}
		e.cache[string(key)] = c
	}
	c.requested = now
	if !c.evaluated.IsZero() && now.Sub(c.evaluated) < MinForCondition {
		e.mu.Unlock()
		return c.match, c.err
	}
	if next := e.lastQuery.Add(MinBetweenMatches); now.Before(next) {
		defer e.mu.Unlock()
		if !c.evaluated.IsZero() {
			return c.match, c.err
		}
		return false, fmt.Errorf("evaluation is throttled until %s", next.UTC().Format("15:04:05Z"))
	}
	e.lastQuery = now
	e.mu.Unlock()
	match, err := e.query(ctx, query)
	e.mu.Lock()
	c.match, c.err, c.evaluated = match, err, e.Clock.Now()
	e.mu.Unlock()
	return match, err
}

// query asks the endpoint; the answer must be one sample, 0 or 1.
func (e *Evaluator) query(ctx context.Context, query string) (bool, error) {
	if e.PromQLURL == "" {
		return false, errors.New("no PromQL query endpoint is configured")
	}
	rt, err := promconfig.NewRoundTripperFromConfig(e.HTTP, "cluster-version-operator")
	if err != nil {
		return false, fmt.Errorf("the PromQL endpoint's TLS or credentials: %w", err)
	}
	client, err := promapi.NewClient(promapi.Config{Address: e.PromQLURL, RoundTripper: rt})
	if err != nil {
		return false, fmt.Errorf("creating PromQL client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	result, _, _, err := promv1.NewAPI(client).Query(ctx, query, e.Clock.Now())
	if err != nil {
		return false, fmt.Errorf("executing the PromQL query: %w", err)
	}
	vec, ok := result.(model.Vector)
	if !ok {
		return false, fmt.Errorf("invalid PromQL result type is %s, not vector", result.Type())
	}
	if len(vec) != 1 {
		return false, fmt.Errorf("invalid PromQL result length must be one, but is %d", len(vec))
	}
	switch v := float64(vec[0].Value); v {
	case 0:
		return false, nil
	case 1:
		return true, nil
	default:
		return false, fmt.Errorf("invalid PromQL result (must be 0 or 1): %v", v)
	}
}

// Recommended evaluates every risk of a conditional update into its
// Recommended condition.
func (e *Evaluator) Recommended(ctx context.Context, risks []configv1.ConditionalUpdateRisk) metav1.Condition {
	cond := metav1.Condition{Type: RecommendedCondition}
	var messages []string
	for _, risk := range risks {
		match, err := e.Match(ctx, risk.MatchingRules)
		switch {
		case err != nil:
			if cond.Status != metav1.ConditionFalse {
				cond.Status = metav1.ConditionUnknown
			}
			if cond.Reason == "" || cond.Reason == ReasonEvaluationFailed {
				cond.Reason = ReasonEvaluationFailed
			} else {
				cond.Reason = ReasonMultipleReasons
			}
			messages = append(messages, fmt.Sprintf("Could not evaluate exposure to update risk %s (%v)\n  %s description: %s\n  %s URL: %s",
				risk.Name, err, risk.Name, risk.Message, risk.Name, risk.URL))
		case match:
			cond.Status = metav1.ConditionFalse
			if cond.Reason == "" {
				cond.Reason = risk.Name
				if !conditionReason.MatchString(risk.Name) {
					cond.Reason = ReasonExposedToRisks
				}
			} else {
				cond.Reason = ReasonMultipleReasons
			}
			messages = append(messages, fmt.Sprintf("%s %s", risk.Message, risk.URL))
		}
	}
	if cond.Status == "" {
		return metav1.Condition{Type: RecommendedCondition, Status: metav1.ConditionTrue, Reason: ReasonNotExposedToRisks,
			Message: "The update is recommended, because none of the conditional update risks apply to this cluster."}
	}
	cond.Message = strings.Join(messages, "\n\n")
	return cond
}
