package sim

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// A zone of the simulated cloud can run out of capacity, as a real
// cloud's availability zone does: every new instance in it is then
// refused with InsufficientInstanceCapacity (the machine goes Failed),
// until the zone is restored. The exhausted zones are kept in the API (a
// ConfigMap in the cloud's namespace), so every process serving the
// cloud, and every restart of one, sees the same.

// zoneCapacityName is the ConfigMap listing the exhausted zones, one key
// each.
const zoneCapacityName = "zone-capacity"

// zoneExhausted is the value of an exhausted zone's key.
const zoneExhausted = "exhausted"

// ExhaustZone makes the cloud refuse every new instance in zone.
func ExhaustZone(ctx context.Context, client kubernetes.Interface, zone string) error {
	return setZone(ctx, client, zone, true)
}

// RestoreZone lets the cloud launch instances in zone again.
func RestoreZone(ctx context.Context, client kubernetes.Interface, zone string) error {
	return setZone(ctx, client, zone, false)
}

// ExhaustedZones lists the zones out of capacity, sorted.
func ExhaustedZones(ctx context.Context, client kubernetes.Interface) ([]string, error) {
	cm, err := client.CoreV1().ConfigMaps(Namespace).Get(ctx, zoneCapacityName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the zones' capacity: %w", err)
	}
	var out []string
	for z, v := range cm.Data {
		if v == zoneExhausted {
			out = append(out, z)
		}
	}
	sort.Strings(out)
	return out, nil
}

func validZone(zone string) error {
	if zone == "" {
		return fmt.Errorf("a zone name must not be empty")
	}
	if errs := validation.IsConfigMapKey(zone); len(errs) > 0 {
		return fmt.Errorf("zone %q: %v", zone, errs[0])
	}
	return nil
}

func setZone(ctx context.Context, client kubernetes.Interface, zone string, exhausted bool) error {
	if err := validZone(zone); err != nil {
		return err
	}
	if err := EnsureNamespace(ctx, client); err != nil {
		return err
	}
	cms := client.CoreV1().ConfigMaps(Namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cms.Get(ctx, zoneCapacityName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if !exhausted {
				return nil
			}
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: zoneCapacityName, Namespace: Namespace}, Data: map[string]string{zone: zoneExhausted}}
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				// Someone else created it: read it again.
				return apierrors.NewConflict(corev1.Resource("configmaps"), zoneCapacityName, err)
			}
			return err
		}
		if err != nil {
			return fmt.Errorf("reading the zones' capacity: %w", err)
		}
		if (cm.Data[zone] == zoneExhausted) == exhausted {
			return nil
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		if exhausted {
			cm.Data[zone] = zoneExhausted
		} else {
			delete(cm.Data, zone)
		}
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
}

// zoneCapacity refuses an instance in an exhausted zone.
func (c *APICloud) zoneCapacity(ctx context.Context, spec InstanceSpec) error {
	cm, err := c.client.CoreV1().ConfigMaps(Namespace).Get(ctx, zoneCapacityName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the zones' capacity: %w", err)
	}
	if cm.Data[spec.Zone] == zoneExhausted {
		return &InstanceError{Reason: ReasonInsufficientCapacity, Message: fmt.Sprintf("zone %s has no capacity left for %s", spec.Zone, spec.Name)}
	}
	return nil
}
