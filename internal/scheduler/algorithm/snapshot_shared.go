package algorithm

// NewSharedSnapshot wraps a node list and pod index owned by a
// cache, without copying: the caller guarantees none changes while the
// snapshot is in use (the scheduler holds its cache lock for a whole
// decision). pods must index exactly the pods of the nodes' NodeInfos.
func NewSharedSnapshot(nodes []*NodeInfo, pods *PodIndex, l Listers) *Snapshot {
	return &Snapshot{Nodes: nodes, Pods: pods, Listers: l, nsLabels: map[string]labelsSet{}}
}
