package api_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/devregistry"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/server"
)

// TestImages: the catalog through the API, verification on demand, and a
// launch whose image's tag moved to an unsigned image refused with the check
// named — and nothing recorded.
func TestImages(t *testing.T) {
	ctx := context.Background()
	classes, err := gpu.LoadFile("../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	reg, images, err := devregistry.StartDir(ctx, "../images", classes)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, server.Overrides{Identify: alice, Images: images})
	var list struct {
		Items []struct {
			Name    string
			Signing struct {
				Keys []struct{ File, Fingerprint string }
			}
		}
	}
	if s, _ := e.do("GET", "/api/v1/images", nil, &list); s != 200 || len(list.Items) != len(images.Catalog.Names()) || list.Items[2].Name != "pytorch" ||
		list.Items[2].Signing.Keys[0].File != "keys/platform.pub" || !strings.HasPrefix(list.Items[2].Signing.Keys[0].Fingerprint, "SHA256:") {
		t.Fatalf("list: %d %+v", s, list)
	}
	if s, _ := e.do("GET", "/api/v1/images/tensorflow", nil, nil); s != 404 {
		t.Errorf("unknown image: %d", s)
	}
	var v struct {
		Digest, Pinned, Signer string
		Attestations           []string
		Cached                 bool
	}
	if s, _ := e.do("POST", "/api/v1/images/pytorch/verify", map[string]any{"tag": "25.01-py3"}, &v); s != 200 ||
		v.Pinned != "registry.gantry.internal/nvidia/pytorch@"+reg.Published["pytorch:25.01-py3"] || len(v.Attestations) != 1 {
		t.Fatalf("verify: %d %+v", s, v)
	}
	var p problem
	if s, _ := e.do("POST", "/api/v1/images/pytorch/verify", map[string]any{"tag": "latest"}, &p); s != 422 || p.Type != "https://gantry.dev/problems/image-refused" ||
		p.fields()["image"] != `tag check: tag "latest" is not approved (allowed: 25.01-py3)` {
		t.Errorf("unapproved tag: %d %+v", s, p)
	}

	// A template's image must be in the catalog, with an approved tag and
	// support for the template's GPU classes.
	doc := templateJSON(t, "../templates/dev-environment.yaml", func(m map[string]any) {
		m["metadata"].(map[string]any)["name"] = "tf-dev"
		m["spec"].(map[string]any)["image"] = "tensorflow:2.15"
	})
	p = problem{}
	if s, _ := e.do("POST", "/api/v1/templates", doc, &p); s != 422 || !strings.Contains(p.fields()["spec.image"], `unknown image "tensorflow"`) {
		t.Errorf("unknown image in a template: %d %+v", s, p)
	}
	doc = templateJSON(t, "../templates/dev-environment.yaml", func(m map[string]any) {
		m["metadata"].(map[string]any)["name"] = "vllm-dev"
		m["spec"].(map[string]any)["image"] = "code-server-cuda:12.8"
		m["spec"].(map[string]any)["gpu"].(map[string]any)["classes"] = []string{"L4", "H200-141GB"}
	})
	p = problem{}
	if s, _ := e.do("POST", "/api/v1/templates", doc, &p); s != 422 || !strings.Contains(p.fields()["spec.gpu.classes[1]"], "image code-server-cuda:12.8 does not support H200-141GB") {
		t.Errorf("unsupported class: %d %+v", s, p)
	}

	// A launch runs the image pinned by digest.
	var w struct{ ID, Image string }
	if s, _ := e.do("POST", "/api/v1/workloads", map[string]any{"template": "pytorch-train", "team": "vision"}, &w); s != 201 ||
		w.Image != "registry.gantry.internal/nvidia/pytorch@"+reg.Published["pytorch:25.01-py3"] {
		t.Fatalf("launch: %d %+v", s, w)
	}
	// The tag moves to an unsigned image: the next launch is refused, naming the check.
	local, _ := reg.Local("registry.gantry.internal/nvidia/pytorch")
	if _, err := reg.Push(ctx, local.Tag("25.01-py3"), "an unsigned rebuild"); err != nil {
		t.Fatal(err)
	}
	p = problem{}
	if s, _ := e.do("POST", "/api/v1/workloads", map[string]any{"template": "pytorch-train", "team": "vision"}, &p); s != 422 ||
		p.fields()["image"] != "signature check: the image is not signed" || !strings.Contains(p.Detail, "image pytorch:25.01-py3 (sha256:") {
		t.Fatalf("unsigned launch: %d %+v", s, p)
	}
	var all struct{ Items []struct{ ID string } }
	if e.do("GET", "/api/v1/workloads?team=vision", nil, &all); len(all.Items) != 1 {
		t.Errorf("the refused launch was recorded: %+v", all.Items)
	}
}
