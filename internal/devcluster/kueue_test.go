package devcluster

import (
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestServeStoredOnly: a Kueue CRD serves the version it stores and no
// other (an older one served has a watch cache that converts through a
// webhook the API server cannot reach); a CRD without exactly one stored
// version is refused, not installed half-understood.
func TestServeStoredOnly(t *testing.T) {
	for _, tc := range []struct {
		name, versions string
		served         []bool
		err            string
	}{
		{"older served", `[{name: v1beta1, served: true, storage: false}, {name: v1beta2, served: true, storage: true}]`, []bool{false, true}, ""},
		{"one version", `[{name: v1, served: true, storage: true}]`, []bool{true}, ""},
		{"no stored version", `[{name: v1beta1, served: true}, {name: v1beta2, served: true}]`, nil, "0 stored versions"},
		{"two stored versions", `[{name: v1beta1, storage: true}, {name: v1beta2, storage: true}]`, nil, "2 stored versions"},
		{"not objects", `[v1beta1]`, nil, "not a list of objects"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var crd map[string]any
			if err := yaml.Unmarshal([]byte("spec: {versions: "+tc.versions+"}"), &crd); err != nil {
				t.Fatal(err)
			}
			err := serveStoredOnly(crd)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var served []bool
			for _, v := range crd["spec"].(map[string]any)["versions"].([]any) {
				served = append(served, v.(map[string]any)["served"] == true)
			}
			if !reflect.DeepEqual(served, tc.served) {
				t.Errorf("served %v, want %v", served, tc.served)
			}
		})
	}
}
