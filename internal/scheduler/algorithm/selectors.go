package algorithm

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// labelSelector converts a LabelSelector; a nil selector matches nothing,
// as in pod affinity terms.
func labelSelector(ls *metav1.LabelSelector) (labels.Selector, error) {
	if ls == nil {
		return labels.Nothing(), nil
	}
	return metav1.LabelSelectorAsSelector(ls)
}

// everything matches every object.
var everything = labels.Everything()
