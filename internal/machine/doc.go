// Package machine is capstan's Machine API: controllers for the OpenShift
// machine.openshift.io/v1beta1 Machine, MachineSet and MachineHealthCheck
// types, in the openshift-machine-api namespace.
//
// The machine controller creates instances through an Actuator (capstan's
// runs on the simulated cloud) and deletes them in the order of the
// lifecycle-hooks chapter: the Deleting phase; preDrain hooks hold the
// drain (Drainable=False, HookPresent); the drain controller cordons and
// evicts through the Eviction API (Drained); preTerminate hooks hold the
// termination (Terminable=False); then the instance is deleted, its Node
// too, and the finalizer removed. The nodelink controller ties Nodes to
// their Machines. Every step is recorded on the Machine, so a controller
// restarted at any point resumes where the last one stopped.
package machine
