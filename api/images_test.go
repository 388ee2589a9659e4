package api_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/devregistry"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/servertest"
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
	lr := servertest.Must(e.api.ListImagesWithResponse(ctx))(t)
	list := servertest.Deref(lr.JSON200)
	i := slices.IndexFunc(list.Items, func(im model.CatalogImage) bool { return im.Name == "pytorch" })
	if lr.StatusCode() != 200 || len(list.Items) != len(images.Catalog.Names()) || i < 0 {
		t.Fatalf("list: %d %s", lr.StatusCode(), lr.Body)
	}
	if keys := servertest.Deref(list.Items[i].Signing.Keys); len(keys) == 0 || keys[0].File != "keys/platform.pub" || !strings.HasPrefix(keys[0].Fingerprint, "SHA256:") {
		t.Fatalf("list: %d %s", lr.StatusCode(), lr.Body)
	}
	if s := servertest.Must(e.api.GetImageWithResponse(ctx, "tensorflow"))(t).StatusCode(); s != 404 {
		t.Errorf("unknown image: %d", s)
	}
	vr := servertest.Must(e.api.VerifyImageWithResponse(ctx, "pytorch", model.VerifyRequest{Tag: "25.01-py3"}))(t)
	if v := servertest.Deref(vr.JSON200); vr.StatusCode() != 200 ||
		v.Pinned != "registry.gantry.internal/nvidia/pytorch@"+reg.Published["pytorch:25.01-py3"] || len(servertest.Deref(v.Attestations)) != 1 {
		t.Fatalf("verify: %d %s", vr.StatusCode(), vr.Body)
	}
	vr = servertest.Must(e.api.VerifyImageWithResponse(ctx, "pytorch", model.VerifyRequest{Tag: "latest"}))(t)
	if p := problemOf(vr.ApplicationproblemJSONDefault); vr.StatusCode() != 422 || p.Type != "https://gantry.dev/problems/image-refused" ||
		p.fields()["image"] != `tag check: tag "latest" is not approved (allowed: 25.01-py3)` {
		t.Errorf("unapproved tag: %d %s", vr.StatusCode(), vr.Body)
	}

	// A template's image must be in the catalog, with an approved tag and
	// support for the template's GPU classes.
	doc := templateDoc(t, "../templates/dev-environment.yaml", func(d *model.TemplateDocument) {
		d.Metadata.Name = "tf-dev"
		d.Spec.Image = "tensorflow:2.15"
	})
	tr := servertest.Must(e.api.CreateTemplateWithResponse(ctx, doc))(t)
	if p := problemOf(tr.ApplicationproblemJSONDefault); tr.StatusCode() != 422 || !strings.Contains(p.fields()["spec.image"], `unknown image "tensorflow"`) {
		t.Errorf("unknown image in a template: %d %s", tr.StatusCode(), tr.Body)
	}
	doc = templateDoc(t, "../templates/dev-environment.yaml", func(d *model.TemplateDocument) {
		d.Metadata.Name = "vllm-dev"
		d.Spec.Image = "code-server-cuda:12.8"
		d.Spec.Gpu.Classes = []string{"L4", "H200-141GB"}
	})
	tr = servertest.Must(e.api.CreateTemplateWithResponse(ctx, doc))(t)
	if p := problemOf(tr.ApplicationproblemJSONDefault); tr.StatusCode() != 422 || !strings.Contains(p.fields()["spec.gpu.classes[1]"], "image code-server-cuda:12.8 does not support H200-141GB") {
		t.Errorf("unsupported class: %d %s", tr.StatusCode(), tr.Body)
	}

	// A launch runs the image pinned by digest.
	launch := model.LaunchRequest{Template: "pytorch-train", Team: "vision"}
	wr := servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, launch))(t)
	if wr.StatusCode() != 201 || servertest.Deref(servertest.Deref(wr.JSON201).Image) != "registry.gantry.internal/nvidia/pytorch@"+reg.Published["pytorch:25.01-py3"] {
		t.Fatalf("launch: %d %s", wr.StatusCode(), wr.Body)
	}
	// The tag moves to an unsigned image: the next launch is refused, naming the check.
	local, _ := reg.Local("registry.gantry.internal/nvidia/pytorch")
	if _, err := reg.Push(ctx, local.Tag("25.01-py3"), "an unsigned rebuild"); err != nil {
		t.Fatal(err)
	}
	wr = servertest.Must(e.api.CreateWorkloadWithResponse(ctx, nil, launch))(t)
	if p := problemOf(wr.ApplicationproblemJSONDefault); wr.StatusCode() != 422 ||
		p.fields()["image"] != "signature check: the image is not signed" || !strings.Contains(p.Detail, "image pytorch:25.01-py3 (sha256:") {
		t.Fatalf("unsigned launch: %d %s", wr.StatusCode(), wr.Body)
	}
	if all := servertest.Deref(servertest.Must(e.api.ListWorkloadsWithResponse(ctx, &model.ListWorkloadsParams{Team: new("vision")}))(t).JSON200); len(all.Items) != 1 {
		t.Errorf("the refused launch was recorded: %+v", all.Items)
	}
}
