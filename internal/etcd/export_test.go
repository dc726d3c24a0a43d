package etcd

// BetweenAddAndStart has f run between etcd's answer to each learner's
// addition and the learner's start: what a host's stand-in and the
// operator do at once on a remote etcd (the etcd-remote scenario).
func (c *Cluster) BetweenAddAndStart(f func(name string)) { c.learnerAdded = f }
