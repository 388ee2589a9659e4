package kapi

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gantryhq/gantry/internal/fault"
)

// TestClassifyForbidden: the authorizer refusing Gantry's own identity is
// the cluster being unusable (an operator's to fix, launches kept), while an
// admission plugin refusing the object is a problem with the request.
func TestClassifyForbidden(t *testing.T) {
	jobs := schema.GroupResource{Group: "batch", Resource: "jobs"}
	rbac := apierrors.NewForbidden(jobs, "train-1", errors.New(`User "system:serviceaccount:gantry-system:gantry" cannot create resource "jobs" in API group "batch" in the namespace "gantry-vision"`))
	var un *fault.Unavailable
	if err := Classify(rbac, "Job", "train-1"); !errors.As(err, &un) {
		t.Errorf("RBAC denial: %T %v, want *fault.Unavailable", err, err)
	}
	psa := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p", errors.New(`violates PodSecurity "restricted:latest": privileged`))
	var inv *fault.Invalid
	if err := Classify(psa, "Pod", "p"); !errors.As(err, &inv) {
		t.Errorf("admission denial: %T %v, want *fault.Invalid", err, err)
	}
}
