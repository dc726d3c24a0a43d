package algorithm

// NewSharedSnapshot wraps a node list and index owned by a cache, without
// copying: the caller guarantees neither changes while the snapshot is in
// use (the scheduler holds its cache lock for a whole decision).
func NewSharedSnapshot(nodes []*NodeInfo, byName map[string]*NodeInfo, l Listers) *Snapshot {
	return &Snapshot{Nodes: nodes, byName: byName, Listers: l, nsLabels: map[string]labelsSet{}}
}
