package machine

import (
	"context"
	"encoding/json"
	"fmt"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Names of the Machine API's validating webhooks, as OpenShift registers
// them.
const (
	WebhookConfigurationName = "machine-api"
	MachineWebhookName       = "validation.machine.machine.openshift.io"
	MachineSetWebhookName    = "validation.machineset.machine.openshift.io"
	MachineWebhookPath       = "/validate-machine-openshift-io-v1beta1-machine"
	MachineSetWebhookPath    = "/validate-machine-openshift-io-v1beta1-machineset"
)

// MachineReviewer validates Machines (see ValidateMachine).
type MachineReviewer struct{}

// Review implements admission.Reviewer.
func (MachineReviewer) Review(_ context.Context, req *admissionv1.AdmissionRequest) (bool, string, error) {
	m := &machinev1.Machine{}
	if err := json.Unmarshal(req.Object.Raw, m); err != nil {
		return false, "", fmt.Errorf("decoding machine: %w", err)
	}
	var old *machinev1.Machine
	if req.Operation == admissionv1.Update {
		old = &machinev1.Machine{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return false, "", fmt.Errorf("decoding old machine: %w", err)
		}
	}
	if errs := ValidateMachine(m, old); len(errs) > 0 {
		return false, errs.ToAggregate().Error(), nil
	}
	return true, "", nil
}

// MachineSetReviewer validates MachineSets (see ValidateMachineSet).
type MachineSetReviewer struct{}

// Review implements admission.Reviewer.
func (MachineSetReviewer) Review(_ context.Context, req *admissionv1.AdmissionRequest) (bool, string, error) {
	ms := &machinev1.MachineSet{}
	if err := json.Unmarshal(req.Object.Raw, ms); err != nil {
		return false, "", fmt.Errorf("decoding machineset: %w", err)
	}
	if errs := ValidateMachineSet(ms); len(errs) > 0 {
		return false, errs.ToAggregate().Error(), nil
	}
	return true, "", nil
}

// WebhookConfiguration registers the Machine and MachineSet webhooks.
func WebhookConfiguration(machines, machineSets admissionregistrationv1.WebhookClientConfig) *admissionregistrationv1.ValidatingWebhookConfiguration {
	hook := func(name, resource string, cc admissionregistrationv1.WebhookClientConfig) admissionregistrationv1.ValidatingWebhook {
		return admissionregistrationv1.ValidatingWebhook{
			Name:         name,
			ClientConfig: cc,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{machinev1.GroupName}, APIVersions: []string{"v1beta1"},
					Resources: []string{resource}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](10),
		}
	}
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: WebhookConfigurationName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			hook(MachineWebhookName, "machines", machines),
			hook(MachineSetWebhookName, "machinesets", machineSets),
		},
	}
}
