package sim

import (
	"context"
	"net/http"

	"k8s.io/client-go/kubernetes"
)

// Each simulated kubelet can write as its own node, as a kubelet does:
// system:node:NAME in the group system:nodes, authorized by the Node
// authorizer and held to its own node and pods by NodeRestriction, and
// seen by API Priority and Fairness as a flow of its own. Its requests
// go through Options.NodeClient, whose transport (NodeTransport) puts
// the credential of the node the request's context names on it.

type nodeKey struct{}

// WithNode says that requests made with ctx are the kubelet of node's.
func WithNode(ctx context.Context, node string) context.Context {
	return context.WithValue(ctx, nodeKey{}, node)
}

// NodeOf is the node WithNode put in ctx ("" for none).
func NodeOf(ctx context.Context) string {
	node, _ := ctx.Value(nodeKey{}).(string)
	return node
}

// NodeTransport wraps a transport that carries no credential of its own
// so that each request bears the bearer token of the node its context
// names (token(node)). A request that names no node is sent as it is,
// without a credential.
func NodeTransport(token func(node string) string) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			node := NodeOf(req.Context())
			if node == "" {
				return rt.RoundTrip(req)
			}
			req = req.Clone(req.Context())
			req.Header.Set("Authorization", "Bearer "+token(node))
			return rt.RoundTrip(req)
		})
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// kubelet is the client and context the kubelet of node writes with: its
// own identity where the simulator has one for nodes, else the
// simulator's.
func (s *Simulator) kubelet(ctx context.Context, node string) (context.Context, kubernetes.Interface) {
	if s.opts.NodeClient == nil {
		return ctx, s.client
	}
	return WithNode(ctx, node), s.opts.NodeClient
}
