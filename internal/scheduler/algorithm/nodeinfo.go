package algorithm

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/capstan-dev/capstan/internal/nodes"
)

// PodInfo is a pod with everything the predicates and priorities compute
// from it once: requests, host ports, parsed affinity terms.
type PodInfo struct {
	Pod        *corev1.Pod
	Requests   Resource
	NonZeroCPU int64
	NonZeroMem int64

	RequiredAffinity      []AffinityTerm
	RequiredAntiAffinity  []AffinityTerm
	PreferredAffinity     []WeightedAffinityTerm
	PreferredAntiAffinity []WeightedAffinityTerm
	// ParseError is set when an affinity term's selector does not parse;
	// such a pod fits nowhere.
	ParseError error
	// HasClaims: the pod mounts persistent volume claims (generic
	// ephemeral volumes included).
	HasClaims bool
	// nodeSelector is the pod's nodeSelector and required node affinity,
	// compiled once; hasNodeSelector says it has either.
	nodeSelector    requiredNodeSelector
	hasNodeSelector bool
	// HostPorts are the host ports the pod binds.
	HostPorts []hostPort
	// BestEffort: no container requests or limits anything.
	BestEffort bool
}

// AffinityTerm is a pod (anti-)affinity term with its selectors parsed.
type AffinityTerm struct {
	Selector          labels.Selector
	Namespaces        sets.Set[string]
	NamespaceSelector labels.Selector // nil: only Namespaces
	TopologyKey       string
	// signature is equal for terms that select the same pods in the same
	// domains (see PodIndex).
	signature string
}

// WeightedAffinityTerm is a preferred term.
type WeightedAffinityTerm struct {
	AffinityTerm
	Weight int32
}

// NewPodInfo computes a PodInfo.
func NewPodInfo(pod *corev1.Pod) *PodInfo {
	pi := &PodInfo{Pod: pod}
	pi.Requests, pi.NonZeroCPU, pi.NonZeroMem = podRequests(pod)
	pi.Requests.Pods = 1
	pi.BestEffort = isBestEffort(pod)
	pi.HostPorts = podHostPorts(pod)
	pi.nodeSelector = newRequiredNodeSelector(pod)
	pi.hasNodeSelector = pi.nodeSelector.set != nil || pi.nodeSelector.affinity
	for i := range pod.Spec.Volumes {
		if v := &pod.Spec.Volumes[i]; v.PersistentVolumeClaim != nil || v.Ephemeral != nil {
			pi.HasClaims = true
		}
	}
	if a := pod.Spec.Affinity; a != nil {
		if pa := a.PodAffinity; pa != nil {
			pi.RequiredAffinity = pi.parseTerms(pa.RequiredDuringSchedulingIgnoredDuringExecution)
			pi.PreferredAffinity = pi.parseWeighted(pa.PreferredDuringSchedulingIgnoredDuringExecution)
		}
		if pa := a.PodAntiAffinity; pa != nil {
			pi.RequiredAntiAffinity = pi.parseTerms(pa.RequiredDuringSchedulingIgnoredDuringExecution)
			pi.PreferredAntiAffinity = pi.parseWeighted(pa.PreferredDuringSchedulingIgnoredDuringExecution)
		}
	}
	return pi
}

// HasAffinity reports whether the pod has any pod (anti-)affinity term.
func (pi *PodInfo) HasAffinity() bool {
	return len(pi.RequiredAffinity)+len(pi.RequiredAntiAffinity)+len(pi.PreferredAffinity)+len(pi.PreferredAntiAffinity) > 0
}

func (pi *PodInfo) parseTerms(terms []corev1.PodAffinityTerm) []AffinityTerm {
	out := make([]AffinityTerm, 0, len(terms))
	for i := range terms {
		t, err := newAffinityTerm(pi.Pod, &terms[i])
		if err != nil {
			pi.ParseError = err
			continue
		}
		out = append(out, t)
	}
	return out
}

func (pi *PodInfo) parseWeighted(terms []corev1.WeightedPodAffinityTerm) []WeightedAffinityTerm {
	out := make([]WeightedAffinityTerm, 0, len(terms))
	for i := range terms {
		t, err := newAffinityTerm(pi.Pod, &terms[i].PodAffinityTerm)
		if err != nil {
			pi.ParseError = err
			continue
		}
		out = append(out, WeightedAffinityTerm{AffinityTerm: t, Weight: terms[i].Weight})
	}
	return out
}

func newAffinityTerm(pod *corev1.Pod, t *corev1.PodAffinityTerm) (AffinityTerm, error) {
	sel, err := labelSelector(t.LabelSelector)
	if err != nil {
		return AffinityTerm{}, err
	}
	term := AffinityTerm{Selector: sel, TopologyKey: t.TopologyKey, Namespaces: sets.New(t.Namespaces...)}
	if t.NamespaceSelector != nil {
		if term.NamespaceSelector, err = labelSelector(t.NamespaceSelector); err != nil {
			return AffinityTerm{}, err
		}
	}
	// No namespaces and no namespace selector: the pod's own namespace.
	if len(t.Namespaces) == 0 && t.NamespaceSelector == nil {
		term.Namespaces.Insert(pod.Namespace)
	}
	term.signature = termSignature(term.Selector, sets.List(term.Namespaces), term.NamespaceSelector, term.TopologyKey)
	return term, nil
}

// Matches reports whether an existing pod (in a namespace with nsLabels)
// matches the term.
func (t *AffinityTerm) Matches(pod *corev1.Pod, nsLabels labels.Set) bool {
	if !t.Namespaces.Has(pod.Namespace) {
		if t.NamespaceSelector == nil || !t.NamespaceSelector.Matches(nsLabels) {
			return false
		}
	}
	return t.Selector.Matches(labels.Set(pod.Labels))
}

// NodeInfo is a node with the pods on it and their aggregate requests.
type NodeInfo struct {
	Node *corev1.Node
	Pods []*PodInfo
	// PodsWithAffinity and PodsWithRequiredAntiAffinity index the pods the
	// inter-pod affinity code must look at.
	PodsWithAffinity             []*PodInfo
	PodsWithRequiredAntiAffinity []*PodInfo

	Allocatable Resource
	Requested   Resource
	// NonZeroRequested is what the priorities use: requests with the
	// default applied to containers that set none.
	NonZeroRequested Resource
	UsedPorts        hostPorts
	// ImageSizes maps every image name the node reports to its size.
	ImageSizes map[string]int64
	// Name, Taints (the NoSchedule and NoExecute ones) and Labels are the
	// node's, kept here beside what the predicates read first, so that a
	// decision does not reach into every node object.
	Name   string
	Taints []corev1.Taint
	Labels map[string]string
	// labelKeys are the label keys the Policy reads (see UseLabelKeys);
	// labelValues holds the node's values for them, inline.
	labelKeys   []string
	labelValues [maxInlineLabels]labelValue
	// ZoneKey, the condition flags and HasZoneLabels are read off the node
	// once per change rather than once per pod.
	ZoneKey                             string
	Ready, MemoryPressure, DiskPressure bool
	PIDPressure, NetworkUnavailable     bool
	HasZoneLabels                       bool
	// Generation changes whenever the NodeInfo does.
	Generation int64
}

// NewNodeInfo builds a NodeInfo for node with the given pods.
func NewNodeInfo(node *corev1.Node, pods ...*PodInfo) *NodeInfo {
	ni := &NodeInfo{}
	ni.SetNode(node)
	for _, p := range pods {
		ni.AddPod(p)
	}
	return ni
}

// SetNode sets or replaces the node object.
func (ni *NodeInfo) SetNode(node *corev1.Node) {
	ni.Node = node
	ni.Name = node.Name
	ni.Labels = node.Labels
	for i, k := range ni.labelKeys {
		ni.labelValues[i].value, ni.labelValues[i].ok = node.Labels[k]
	}
	ni.Taints = ni.Taints[:0]
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			ni.Taints = append(ni.Taints, t)
		}
	}
	ni.Allocatable = resourceFromList(node.Status.Allocatable)
	ni.ZoneKey = zoneKey(node)
	ni.Ready = nodes.Ready(node)
	ni.MemoryPressure = nodes.ConditionStatus(node, corev1.NodeMemoryPressure) == corev1.ConditionTrue
	ni.DiskPressure = nodes.ConditionStatus(node, corev1.NodeDiskPressure) == corev1.ConditionTrue
	ni.PIDPressure = nodes.ConditionStatus(node, corev1.NodePIDPressure) == corev1.ConditionTrue
	ni.NetworkUnavailable = nodes.ConditionStatus(node, corev1.NodeNetworkUnavailable) == corev1.ConditionTrue
	ni.HasZoneLabels = false
	for _, k := range zoneLabelKeys {
		if _, ok := node.Labels[k]; ok {
			ni.HasZoneLabels = true
		}
	}
	ni.ImageSizes = make(map[string]int64, len(node.Status.Images))
	for _, img := range node.Status.Images {
		for _, name := range img.Names {
			ni.ImageSizes[normalizeImage(name)] = img.SizeBytes
		}
	}
	ni.Generation++
}

// maxInlineLabels is how many label keys a NodeInfo keeps values of.
const maxInlineLabels = 8

// TopologyLabelKeys are the keys pod (anti-)affinity and spreading use
// most: worth keeping at hand on every NodeInfo.
var TopologyLabelKeys = []string{corev1.LabelHostname, corev1.LabelTopologyZone, corev1.LabelTopologyRegion}

type labelValue struct {
	value string
	ok    bool
}

// UseLabelKeys makes the NodeInfo keep its node's values of these label
// keys (those a Policy's configurable predicates and priorities read), so
// that Label answers them without a map lookup; keys beyond the first few
// are looked up in the map. Call it before SetNode.
func (ni *NodeInfo) UseLabelKeys(keys []string) {
	ni.labelKeys = keys[:min(len(keys), maxInlineLabels)]
}

// Label returns the node's value of a label.
func (ni *NodeInfo) Label(key string) (string, bool) {
	for i, k := range ni.labelKeys {
		if k == key {
			return ni.labelValues[i].value, ni.labelValues[i].ok
		}
	}
	v, ok := ni.Labels[key]
	return v, ok
}

// AddPod accounts for a pod on the node.
func (ni *NodeInfo) AddPod(pi *PodInfo) {
	ni.Pods = append(ni.Pods, pi)
	if pi.HasAffinity() {
		ni.PodsWithAffinity = append(ni.PodsWithAffinity, pi)
	}
	if len(pi.RequiredAntiAffinity) > 0 {
		ni.PodsWithRequiredAntiAffinity = append(ni.PodsWithRequiredAntiAffinity, pi)
	}
	ni.Requested.Add(&pi.Requests)
	ni.NonZeroRequested.MilliCPU += pi.NonZeroCPU
	ni.NonZeroRequested.Memory += pi.NonZeroMem
	ni.NonZeroRequested.Pods++
	ni.UsedPorts.add(pi.HostPorts)
	ni.Generation++
}

// RemovePod removes a pod by UID; it returns the pod's info, or nil when
// the pod was not there.
func (ni *NodeInfo) RemovePod(pod *corev1.Pod) *PodInfo {
	idx := -1
	for i, p := range ni.Pods {
		if p.Pod.UID == pod.UID {
			idx = i
			break
		}
	}
	if idx < 0 {
		return nil
	}
	pi := ni.Pods[idx]
	ni.Pods = removeAt(ni.Pods, idx)
	ni.PodsWithAffinity = removePodInfo(ni.PodsWithAffinity, pi)
	ni.PodsWithRequiredAntiAffinity = removePodInfo(ni.PodsWithRequiredAntiAffinity, pi)
	ni.Requested.Sub(&pi.Requests)
	ni.NonZeroRequested.MilliCPU -= pi.NonZeroCPU
	ni.NonZeroRequested.Memory -= pi.NonZeroMem
	ni.NonZeroRequested.Pods--
	ni.UsedPorts.remove(pi.HostPorts)
	ni.Generation++
	return pi
}

func removeAt(s []*PodInfo, i int) []*PodInfo {
	s[i] = s[len(s)-1]
	s[len(s)-1] = nil
	return s[:len(s)-1]
}

func removePodInfo(s []*PodInfo, pi *PodInfo) []*PodInfo {
	for i, p := range s {
		if p == pi {
			return removeAt(s, i)
		}
	}
	return s
}

// hostPort is a (protocol, ip, port) a pod binds on its node.
type hostPort struct {
	protocol corev1.Protocol
	ip       string
	port     int32
}

// hostPorts counts the host ports in use on a node.
type hostPorts map[hostPort]int

// podHostPorts are the host ports of the pod's containers and of its
// sidecars (restartable init containers), which run as long as it does.
func podHostPorts(pod *corev1.Pod) []hostPort {
	var out []hostPort
	add := func(c *corev1.Container) {
		for _, p := range c.Ports {
			if p.HostPort <= 0 {
				continue
			}
			proto := p.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			ip := p.HostIP
			if ip == "" {
				ip = "0.0.0.0"
			}
			out = append(out, hostPort{proto, ip, p.HostPort})
		}
	}
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(c)
		}
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i])
	}
	return out
}

func (hp *hostPorts) add(ports []hostPort) {
	for _, p := range ports {
		if *hp == nil {
			*hp = hostPorts{}
		}
		(*hp)[p]++
	}
}

func (hp hostPorts) remove(ports []hostPort) {
	for _, p := range ports {
		if hp[p] <= 1 {
			delete(hp, p)
		} else {
			hp[p]--
		}
	}
}

// conflicts reports whether p collides with a port in use: same protocol
// and port, and the same IP or either side on 0.0.0.0.
func (hp hostPorts) conflicts(p hostPort) bool {
	for used := range hp {
		if used.port == p.port && used.protocol == p.protocol &&
			(used.ip == p.ip || used.ip == "0.0.0.0" || p.ip == "0.0.0.0") {
			return true
		}
	}
	return false
}
