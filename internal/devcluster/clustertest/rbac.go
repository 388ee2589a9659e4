package clustertest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// Rules decodes RBAC rule files (the chart's files/*-rules.yaml) into one
// list.
func Rules(files ...[]byte) ([]rbacv1.PolicyRule, error) {
	var out []rbacv1.PolicyRule
	for _, data := range files {
		var rules []rbacv1.PolicyRule
		if err := yaml.UnmarshalStrict(data, &rules); err != nil {
			return nil, err
		}
		out = append(out, rules...)
	}
	return out, nil
}

// Grants expands RBAC rules into group/resource verb keys.
func Grants(files ...[]byte) (map[string]bool, error) {
	rules, err := Rules(files...)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out[RBACKey(g, res, v)] = true
				}
			}
		}
	}
	return out, nil
}

// RBACKey names a grant as Audited names a request: group/resource verb
// ("core" for the core group).
func RBACKey(group, resource, verb string) string {
	if group == "" {
		group = "core"
	}
	return group + "/" + resource + " " + verb
}

// Audited reads an API server audit log: the resource requests user made
// (impersonated), and those it was refused. A server-side apply that
// creates is audited as an allowed patch; the create it also needs is
// authorized inside the patch, and its refusal shows only in the response
// (403, "cannot create resource"): counted as the create refused.
func Audited(path, user string) (used map[string]bool, refused []string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("the API server's audit log: %w", err)
	}
	defer f.Close()
	used = map[string]bool{}
	dec := json.NewDecoder(f)
	for {
		var ev struct {
			Verb             string
			ImpersonatedUser *struct{ Username string }
			ObjectRef        *struct{ Resource, Subresource, APIGroup string }
			ResponseStatus   *struct {
				Code    int
				Message string
			}
			Annotations map[string]string
		}
		if err := dec.Decode(&ev); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		if ev.ImpersonatedUser == nil || ev.ImpersonatedUser.Username != user || ev.ObjectRef == nil || ev.ObjectRef.Resource == "" {
			continue
		}
		res := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			res += "/" + ev.ObjectRef.Subresource
		}
		k := RBACKey(ev.ObjectRef.APIGroup, res, ev.Verb)
		if st := ev.ResponseStatus; ev.Verb == "patch" && st != nil && st.Code == 403 && strings.Contains(st.Message, " cannot create resource ") {
			k = RBACKey(ev.ObjectRef.APIGroup, res, "create")
			if !slices.Contains(refused, k) {
				refused = append(refused, k)
			}
			continue
		}
		// Refused by the authorizer (RBAC), not by admission (Pod Security).
		if ev.Annotations["authorization.k8s.io/decision"] == "forbid" {
			if !slices.Contains(refused, k) {
				refused = append(refused, k)
			}
			continue
		}
		used[k] = true
	}
	sort.Strings(refused)
	return used, refused, nil
}
