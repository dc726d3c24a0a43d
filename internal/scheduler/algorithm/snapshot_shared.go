package algorithm

// NewSharedSnapshot wraps a node list, node index and pod index owned by a
// cache, without copying: the caller guarantees none changes while the
// snapshot is in use (the scheduler holds its cache lock for a whole
// decision). pods must index exactly the pods of the nodes' NodeInfos.
func NewSharedSnapshot(nodes []*NodeInfo, byName map[string]*NodeInfo, pods *PodIndex, l Listers) *Snapshot {
	return &Snapshot{Nodes: nodes, byName: byName, Pods: pods, Listers: l, nsLabels: map[string]labelsSet{}}
}
