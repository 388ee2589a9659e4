package karpenter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/gantryhq/gantry/internal/nodegroup"
)

// NodePools is Karpenter's resource for a pool of machines it scales.
var NodePools = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodepools"}

// fieldManager owns, in each group's NodePool, the fields the node groups
// set.
const fieldManager = "gantry-node-groups"

// Sizes keeps each scaled group's NodePool (the NodePool named as the
// group) at the group's size and quiet time as they are in force — the
// file's, or the platform team's edit over it: spec.limits (the max, in
// GPUs) and spec.disruption.consolidateAfter (the quiet time), written by
// server-side apply as their only owner. Everything else in the NodePool
// (its template, node class and requirements) is the deployment's. A group
// whose NodePool does not exist is named in Sync's error (once per
// SizesRefresh) and written as soon as it appears.
type Sizes struct {
	dyn     dynamic.Interface
	groups  *nodegroup.Set
	applied map[string]applied   // by group: what was last written, and when
	missing map[string]time.Time // by group: when its missing NodePool was last said
	now     func() time.Time
}

type applied struct {
	spec string
	at   time.Time
}

// SizesRefresh is how often a NodePool is written again though its group
// did not change (someone else may have changed it).
const SizesRefresh = 5 * time.Minute

// NewSizes returns the NodePools' sizes kept from groups.
func NewSizes(dyn dynamic.Interface, groups *nodegroup.Set, now func() time.Time) (*Sizes, error) {
	if dyn == nil || groups == nil || now == nil {
		return nil, errors.New("karpenter: sizes need a client, the node groups and a clock")
	}
	return &Sizes{dyn: dyn, groups: groups, applied: map[string]applied{}, missing: map[string]time.Time{}, now: now}, nil
}

// Sync writes each scaled group's limits and quiet time into its NodePool
// where they changed since last written here (or SizesRefresh ago). Only
// the leader's loop calls it.
func (s *Sizes) Sync(ctx context.Context) error {
	var errs []error
	now := s.now()
	for _, g := range s.groups.List() {
		if !Scaled(g) {
			continue
		}
		limit, quiet := strconv.Itoa(g.MaxGPUs()), durationText(g.Quiet())
		spec := limit + "/" + quiet
		if a, ok := s.applied[g.Name]; ok && a.spec == spec && now.Sub(a.at) < SizesRefresh {
			continue
		}
		res := s.dyn.Resource(NodePools)
		if _, err := res.Get(ctx, g.Name, metav1.GetOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				// Looked for at every pass (written once it appears), said
				// once per refresh.
				if at, ok := s.missing[g.Name]; ok && now.Sub(at) < SizesRefresh {
					continue
				}
				s.missing[g.Name] = now
				err = errors.New("no NodePool of that name: the deployment creates it (docs/capacity.md)")
			}
			errs = append(errs, fmt.Errorf("node group %s: %w", g.Name, err))
			continue
		}
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": NodePools.GroupVersion().String(),
			"kind":       "NodePool",
			"metadata":   map[string]any{"name": g.Name},
			"spec": map[string]any{
				"limits":     map[string]any{"nvidia.com/gpu": limit},
				"disruption": map[string]any{"consolidateAfter": quiet},
			},
		}}
		if _, err := res.Apply(ctx, g.Name, u, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
			errs = append(errs, fmt.Errorf("node group %s: write its NodePool's limits: %w", g.Name, err))
			continue
		}
		s.applied[g.Name] = applied{spec: spec, at: now}
		delete(s.missing, g.Name)
	}
	return errors.Join(errs...)
}
