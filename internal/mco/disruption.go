package mco

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"

	igntypes "github.com/coreos/ignition/v2/config/v3_5/types"
	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	opv1 "github.com/openshift/api/operator/v1"
	"github.com/vincent-petithory/dataurl"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What a node does to take a new configuration, as the
// machine-config-daemon decides it: a change the cluster's node
// disruption policy (the MachineConfiguration cluster's, merged over the
// MCO's defaults) covers takes that policy's actions, in order; any other
// change, and any change of the OS image, kernel arguments, extensions,
// kernel type or FIPS, reboots the node. A reboot or a Drain action
// drains the node first; the Special action (registries.conf) drains only
// when a registry setting is removed.

// MachineConfigurationName is the MCO's operator configuration object.
const MachineConfigurationName = "cluster"

func reloadAction(service string) opv1.NodeDisruptionPolicyStatusAction {
	return opv1.NodeDisruptionPolicyStatusAction{Type: opv1.ReloadStatusAction, Reload: &opv1.ReloadService{ServiceName: opv1.NodeDisruptionPolicyServiceName(service)}}
}

func restartAction(service string) opv1.NodeDisruptionPolicyStatusAction {
	return opv1.NodeDisruptionPolicyStatusAction{Type: opv1.RestartStatusAction, Restart: &opv1.RestartService{ServiceName: opv1.NodeDisruptionPolicyServiceName(service)}}
}

var noneAction = opv1.NodeDisruptionPolicyStatusAction{Type: opv1.NoneStatusAction}

// DefaultDisruptionPolicies are the MCO's own: the pull secret, the
// registries' configuration and signatures, the CA bundles, the
// credential providers and SSH keys take no reboot.
func DefaultDisruptionPolicies() opv1.NodeDisruptionPolicyClusterStatus {
	return opv1.NodeDisruptionPolicyClusterStatus{
		Files: []opv1.NodeDisruptionPolicyStatusFile{
			{Path: "/var/lib/kubelet/config.json", Actions: []opv1.NodeDisruptionPolicyStatusAction{noneAction}},
			{Path: "/etc/machine-config-daemon/no-reboot/containers-gpg.pub", Actions: []opv1.NodeDisruptionPolicyStatusAction{reloadAction("crio.service")}},
			{Path: "/etc/containers/policy.json", Actions: []opv1.NodeDisruptionPolicyStatusAction{reloadAction("crio.service")}},
			{Path: "/etc/containers/registries.conf", Actions: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.SpecialStatusAction}}},
			{Path: "/etc/containers/registries.d", Actions: []opv1.NodeDisruptionPolicyStatusAction{reloadAction("crio.service")}},
			{Path: "/etc/crio/policies", Actions: []opv1.NodeDisruptionPolicyStatusAction{reloadAction("crio.service")}},
			{Path: "/etc/nmstate/openshift", Actions: []opv1.NodeDisruptionPolicyStatusAction{noneAction}},
			{Path: "/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt", Actions: []opv1.NodeDisruptionPolicyStatusAction{
				restartAction("coreos-update-ca-trust.service"), restartAction("crio.service")}},
			{Path: "/etc/kubernetes/credential-providers", Actions: []opv1.NodeDisruptionPolicyStatusAction{restartAction("kubelet.service")}},
			{Path: "/etc/systemd/system/kubelet.service.d/40-kubelet-crio-image-credential-provider.conf", Actions: []opv1.NodeDisruptionPolicyStatusAction{
				{Type: opv1.DaemonReloadStatusAction}, restartAction("kubelet.service")}},
		},
		SSHKey: opv1.NodeDisruptionPolicyStatusSSHKey{Actions: []opv1.NodeDisruptionPolicyStatusAction{noneAction}},
	}
}

// MergeDisruptionPolicies lays the admin's policies over the defaults: a
// path or unit the admin names replaces the default's, others are added;
// the admin's SSH key actions, if any, replace the default's.
func MergeDisruptionPolicies(user opv1.NodeDisruptionPolicyConfig) opv1.NodeDisruptionPolicyClusterStatus {
	out := DefaultDisruptionPolicies()
	for _, f := range user.Files {
		sf := opv1.NodeDisruptionPolicyStatusFile{Path: f.Path, Actions: statusActions(f.Actions)}
		if i := slices.IndexFunc(out.Files, func(d opv1.NodeDisruptionPolicyStatusFile) bool { return d.Path == f.Path }); i >= 0 {
			out.Files[i] = sf
		} else {
			out.Files = append(out.Files, sf)
		}
	}
	for _, u := range user.Units {
		su := opv1.NodeDisruptionPolicyStatusUnit{Name: u.Name, Actions: statusActions(u.Actions)}
		if i := slices.IndexFunc(out.Units, func(d opv1.NodeDisruptionPolicyStatusUnit) bool { return d.Name == u.Name }); i >= 0 {
			out.Units[i] = su
		} else {
			out.Units = append(out.Units, su)
		}
	}
	if len(user.SSHKey.Actions) > 0 {
		out.SSHKey = opv1.NodeDisruptionPolicyStatusSSHKey{Actions: statusActions(user.SSHKey.Actions)}
	}
	return out
}

func statusActions(spec []opv1.NodeDisruptionPolicySpecAction) []opv1.NodeDisruptionPolicyStatusAction {
	out := make([]opv1.NodeDisruptionPolicyStatusAction, 0, len(spec))
	for _, a := range spec {
		s := opv1.NodeDisruptionPolicyStatusAction{Type: opv1.NodeDisruptionPolicyStatusActionType(a.Type)}
		if a.Reload != nil {
			s.Reload = &opv1.ReloadService{ServiceName: a.Reload.ServiceName}
		}
		if a.Restart != nil {
			s.Restart = &opv1.RestartService{ServiceName: a.Restart.ServiceName}
		}
		out = append(out, s)
	}
	return out
}

// ConfigDiff is what changed between two rendered configurations.
type ConfigDiff struct {
	// OS is set when more than files, units and SSH keys changed (the OS
	// image, kernel arguments, extensions, kernel type, FIPS): a reboot.
	OS    string
	Files []string
	Units []string
	SSH   bool
	// oldRegistries and newRegistries are registries.conf's contents.
	oldRegistries, newRegistries []byte
}

// DiffConfigs compares two rendered MachineConfigs.
func DiffConfigs(old, new *mcfgv1.MachineConfig) (*ConfigDiff, error) {
	d := &ConfigDiff{}
	switch {
	case old.Spec.OSImageURL != new.Spec.OSImageURL:
		d.OS = "osImageURL"
	case !slices.Equal(old.Spec.KernelArguments, new.Spec.KernelArguments):
		d.OS = "kernelArguments"
	case !slices.Equal(old.Spec.Extensions, new.Spec.Extensions):
		d.OS = "extensions"
	case old.Spec.KernelType != new.Spec.KernelType:
		d.OS = "kernelType"
	case old.Spec.FIPS != new.Spec.FIPS:
		d.OS = "fips"
	case old.Spec.BaseOSExtensionsContainerImage != new.Spec.BaseOSExtensionsContainerImage:
		d.OS = "baseOSExtensionsContainerImage"
	}
	oi, err := ParseIgnition(old.Spec.Config.Raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", old.Name, err)
	}
	ni, err := ParseIgnition(new.Spec.Config.Raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", new.Name, err)
	}
	of, nf := byKey(oi.Storage.Files, func(f igntypes.File) string { return f.Path }), byKey(ni.Storage.Files, func(f igntypes.File) string { return f.Path })
	d.Files = changedKeys(of, nf)
	d.Units = changedKeys(byKey(oi.Systemd.Units, func(u igntypes.Unit) string { return u.Name }), byKey(ni.Systemd.Units, func(u igntypes.Unit) string { return u.Name }))
	d.SSH = !reflect.DeepEqual(oi.Passwd, ni.Passwd)
	const registries = "/etc/containers/registries.conf"
	d.oldRegistries, d.newRegistries = fileContents(of[registries]), fileContents(nf[registries])
	return d, nil
}

// byKey indexes items by key.
func byKey[T any](items []T, key func(T) string) map[string]T {
	m := make(map[string]T, len(items))
	for _, it := range items {
		m[key(it)] = it
	}
	return m
}

// changedKeys are the keys, sorted, added, removed or changed between two
// indexes.
func changedKeys[T any](old, new map[string]T) []string {
	var out []string
	for k, v := range new {
		if o, ok := old[k]; !ok || !reflect.DeepEqual(o, v) {
			out = append(out, k)
		}
	}
	for k := range old {
		if _, ok := new[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func fileContents(f igntypes.File) []byte {
	if f.Contents.Source == nil {
		return nil
	}
	u, err := dataurl.DecodeString(*f.Contents.Source)
	if err != nil {
		return []byte(*f.Contents.Source)
	}
	return u.Data
}

// DisruptionActions are the actions a change takes under the policies,
// as the daemon reduces them: a reboot alone if any is one, None dropped
// beside other actions.
func DisruptionActions(d *ConfigDiff, p opv1.NodeDisruptionPolicyClusterStatus) []opv1.NodeDisruptionPolicyStatusAction {
	reboot := []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.RebootStatusAction}}
	if d.OS != "" {
		return reboot
	}
	var actions []opv1.NodeDisruptionPolicyStatusAction
	for _, path := range d.Files {
		found, best := false, -1
		for i, f := range p.Files {
			if (path == f.Path || strings.HasPrefix(path, strings.TrimSuffix(f.Path, "/")+"/")) && (best < 0 || len(f.Path) > len(p.Files[best].Path)) {
				found, best = true, i
			}
		}
		if !found {
			return reboot
		}
		actions = append(actions, p.Files[best].Actions...)
	}
	for _, name := range d.Units {
		i := slices.IndexFunc(p.Units, func(u opv1.NodeDisruptionPolicyStatusUnit) bool { return string(u.Name) == name })
		if i < 0 {
			return reboot
		}
		actions = append(actions, p.Units[i].Actions...)
	}
	if d.SSH {
		actions = append(actions, p.SSHKey.Actions...)
	}
	has := func(ts ...opv1.NodeDisruptionPolicyStatusActionType) bool {
		return slices.ContainsFunc(actions, func(a opv1.NodeDisruptionPolicyStatusAction) bool { return slices.Contains(ts, a.Type) })
	}
	if has(opv1.RebootStatusAction) {
		return reboot
	}
	if has(opv1.NoneStatusAction) {
		if has(opv1.DrainStatusAction, opv1.ReloadStatusAction, opv1.RestartStatusAction, opv1.DaemonReloadStatusAction, opv1.SpecialStatusAction) {
			return slices.DeleteFunc(actions, func(a opv1.NodeDisruptionPolicyStatusAction) bool { return a.Type == opv1.NoneStatusAction })
		}
		return []opv1.NodeDisruptionPolicyStatusAction{noneAction}
	}
	if len(actions) == 0 {
		return []opv1.NodeDisruptionPolicyStatusAction{noneAction}
	}
	return actions
}

// DrainRequired reports whether the actions need the node drained first:
// a reboot or a Drain action does; the Special action does when a line
// of registries.conf (a registry or mirror setting) is removed.
func DrainRequired(actions []opv1.NodeDisruptionPolicyStatusAction, d *ConfigDiff) bool {
	for _, a := range actions {
		if a.Type == opv1.RebootStatusAction || a.Type == opv1.DrainStatusAction {
			return true
		}
	}
	for _, a := range actions {
		if a.Type == opv1.SpecialStatusAction {
			kept := map[string]bool{}
			for _, l := range bytes.Split(d.newRegistries, []byte("\n")) {
				kept[strings.TrimSpace(string(l))] = true
			}
			for _, l := range bytes.Split(d.oldRegistries, []byte("\n")) {
				if s := strings.TrimSpace(string(l)); s != "" && !strings.HasPrefix(s, "#") && !kept[s] {
					return true
				}
			}
		}
	}
	return false
}

// disruptionPolicies reads the cluster's policies (the MachineConfiguration
// cluster's spec merged over the defaults) and records them in its status,
// as the operator does.
func (d *daemon) disruptionPolicies(ctx context.Context) (opv1.NodeDisruptionPolicyClusterStatus, error) {
	if d.operator == nil {
		return DefaultDisruptionPolicies(), nil
	}
	mc, err := d.operator.OperatorV1().MachineConfigurations().Get(ctx, MachineConfigurationName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return DefaultDisruptionPolicies(), nil
	}
	if err != nil {
		return opv1.NodeDisruptionPolicyClusterStatus{}, fmt.Errorf("reading MachineConfiguration %s: %w", MachineConfigurationName, err)
	}
	reported := mc.DeepCopy()
	reported.APIVersion, reported.Kind = opv1.GroupVersion.String(), "MachineConfiguration"
	d.unhonoured.Report(d.recorder, "MachineConfiguration", reported, mc.UID, mc.Generation)
	merged := MergeDisruptionPolicies(mc.Spec.NodeDisruptionPolicy)
	if !reflect.DeepEqual(mc.Status.NodeDisruptionPolicyStatus.ClusterPolicies, merged) {
		mc.Status.NodeDisruptionPolicyStatus.ClusterPolicies = merged
		if _, err := d.operator.OperatorV1().MachineConfigurations().UpdateStatus(ctx, mc, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			return merged, fmt.Errorf("writing the status of MachineConfiguration %s: %w", MachineConfigurationName, err)
		}
	}
	return merged, nil
}
