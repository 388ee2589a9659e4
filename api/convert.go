package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/imagecat"
	"github.com/gantryhq/gantry/internal/imageverify"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/workload"
)

// parseTemplate validates a template body exactly as a template file: the wire
// document goes back to JSON and through template.Parse.
func (s *server) parseTemplate(doc *model.TemplateDocument) (*template.Template, error) {
	data, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encode template body: %w", err)
	}
	t, err := s.o.Catalog.Parse("", data)
	if err != nil {
		return nil, withoutLines(err)
	}
	return t, nil
}

// withoutLines drops the lines of the re-encoded body, which mean nothing to the
// caller; the field paths say where.
func withoutLines(err error) error {
	inv, ok := err.(*fault.Invalid)
	if !ok {
		return err
	}
	var l fault.List
	for _, f := range inv.Fields {
		f.Line, f.File = 0, ""
		l.Add(f)
	}
	return l.Err()
}

func templateVersion(v catalog.Version) model.TemplateVersion {
	var doc model.TemplateDocument
	if err := remarshal(v.Template, &doc); err != nil {
		panic(err) // both sides describe the same JSON document; a test guards it
	}
	out := model.TemplateVersion{Name: v.Name, Version: v.Version, Digest: v.Digest, CreatedAt: v.CreatedAt, CreatedBy: v.CreatedBy, Template: doc}
	if v.Status != "" {
		out.Status = ptr(model.TemplateVersionStatus(v.Status))
	}
	if v.StatusReason != "" {
		out.StatusReason = ptr(v.StatusReason)
	}
	return out
}

func templateList(vs []catalog.Version) model.TemplateList {
	out := model.TemplateList{Items: make([]model.TemplateVersion, len(vs))}
	for i, v := range vs {
		out.Items[i] = templateVersion(v)
	}
	return out
}

func gpuClass(c gpu.Class) model.GPUClass {
	out := model.GPUClass{Name: c.Name, Products: c.Products, MemoryGiB: c.MemoryGiB, MigProfiles: []model.MIGProfile{}}
	if c.VMDeviceName != "" {
		out.VmDeviceName = ptr(c.VMDeviceName)
	}
	if c.Watts > 0 {
		out.Watts = ptr(c.Watts)
	}
	if cc := c.Confidential; cc != nil {
		tees := make([]model.GPUClassConfidentialTees, len(cc.TEEs))
		for i, t := range cc.TEEs {
			tees[i] = model.GPUClassConfidentialTees(t)
		}
		out.Confidential = &struct {
			Mig  bool                             `json:"mig"`
			Tees []model.GPUClassConfidentialTees `json:"tees"`
		}{Mig: cc.MIG, Tees: tees}
	}
	if c.Description != "" {
		out.Description = ptr(c.Description)
	}
	out.Price = priceOut(c.Price)
	for _, p := range c.MIG {
		out.MigProfiles = append(out.MigProfiles, model.MIGProfile{Name: p.Name, Resource: p.Resource(), ComputeShare: p.ComputeShare(), MemoryShare: p.MemoryShare(), MaxInstances: p.MaxInstances})
	}
	return out
}

// actionsOf is workload.Actions of each status, as the API answers them.
var actionsOf = func() map[workload.Status]*[]model.WorkloadActions {
	m := map[workload.Status]*[]model.WorkloadActions{}
	for _, st := range workload.Statuses {
		acts := []model.WorkloadActions{}
		for _, a := range workload.Actions(st) {
			acts = append(acts, model.WorkloadActions(a))
		}
		m[st] = &acts
	}
	return m
}()

// deferralOut is a flexible job's wait for cleaner power as the API shows it.
func deferralOut(d *workload.Deferral) *model.WorkloadDeferral {
	out := &model.WorkloadDeferral{Latest: d.Latest, WindowEnd: d.WindowEnd, RuntimeSeconds: int64(d.Runtime.Seconds()),
		AtOnce: math.Round(d.AtOnce*10) / 10, AtStart: math.Round(d.AtStart*10) / 10, SavingPercent: math.Round(d.Saving()*1000) / 10,
		Source: d.Source, Location: d.Location}
	if d.Cluster != "" {
		out.Cluster = ptr(d.Cluster)
	}
	if d.Holding() {
		out.Until = ptr(d.Until)
	}
	if !d.Released.IsZero() {
		out.Released, out.ReleasedBy = ptr(d.Released), ptr(d.ReleasedBy)
	}
	return out
}

// workloadOut is a workload as the API shows it, its cost and running time
// up to now on the server's clock.
func (s *server) workloadOut(w workload.Workload) model.Workload {
	now := s.o.Now()
	out := model.Workload{
		Id: w.ID, Name: w.Name, Team: w.Team.String(), Owner: w.Owner, Template: w.Template, TemplateVersion: w.TemplateVersion,
		Kind: model.WorkloadKind(w.Kind), Parameters: w.Parameters, ObjectsHash: w.ObjectsHash, Status: model.WorkloadStatus(w.Status),
		Applied: w.Applied(), CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt,
		PricePerHour: w.RunPricePerHour(), CostSoFar: math.Round(w.CostAt(now)*100) / 100,
		Attempts: w.Attempts, RanSeconds: math.Round(w.RanFor(now).Seconds()),
	}
	if w.Trial != nil {
		out.Trial = ptr(w.Trial.ID)
	}
	if !w.StartedAt.IsZero() {
		out.StartedAt = ptr(w.StartedAt)
	}
	if w.NodeGroup != "" {
		out.NodeGroup = ptr(w.NodeGroup)
	}
	if w.Cluster != "" {
		out.Cluster = ptr(w.Cluster)
	}
	if w.Held {
		out.Held = ptr(true)
	}
	out.Actions = actionsOf[w.Status] // shared, read only: made once per status
	if d := w.Deferral; d != nil {
		out.Deferral = deferralOut(d)
	}
	if !w.ActionsOfStatus() {
		// What it allows beyond its status's (start now, held for cleaner
		// power; stop, a start waiting for approval).
		acts := []model.WorkloadActions{}
		for _, a := range w.Actions() {
			acts = append(acts, model.WorkloadActions(a))
		}
		out.Actions = &acts
	}
	if !w.EndedAt.IsZero() {
		out.EndedAt = ptr(w.EndedAt)
	}
	out.ExitCode = w.ExitCode
	if w.Reason != "" {
		out.Reason = ptr(w.Reason)
	}
	if w.Image != "" {
		out.Image = ptr(w.Image)
	}
	if w.TEE != "" {
		out.Tee = ptr(model.WorkloadTee(w.TEE))
	}
	if w.Endpoint != "" {
		out.Endpoint = ptr(w.Endpoint)
	}
	if w.TemplateStatus != "" {
		out.TemplateStatus = ptr(model.WorkloadTemplateStatus(w.TemplateStatus))
		out.TemplateStatusReason = ptr(w.TemplateStatusReason)
	}
	if w.Kind == template.Notebook {
		out.Url = ptr(template.BasePath(w.ID))
	}
	if n := len(w.SpotEvictions); n > 0 {
		out.SpotEvictions = ptr(n)
	}
	if a := w.Approval; a.Needed() {
		out.Approval = &model.Approval{Why: a.Why, ExpiresAt: a.Expires,
			Approvers: []string{"team-admin of " + w.Team.String(), "platform-admin"}}
		if a.Restart {
			out.Approval.Restart = ptr(true)
		}
		if a.Decision != "" {
			out.Approval.Decision = ptr(model.ApprovalDecision(a.Decision))
			out.Approval.DecidedBy, out.Approval.Note, out.Approval.DecidedAt = ptr(a.By), ptr(a.Note), ptr(a.At)
		}
	}
	if out.Parameters == nil {
		out.Parameters = map[string]string{}
	}
	out.Gpu.Class, out.Gpu.Count = w.GPUClass, w.GPUCount
	if w.MIGProfile != "" {
		out.Gpu.MigProfile = ptr(w.MIGProfile)
	}
	return out
}

func choice(g *model.GPUChoice, params *model.Parameters, confidential, cpuOnly *bool) template.Choice {
	c := template.Choice{Confidential: deref(confidential), CPUOnly: deref(cpuOnly)}
	if g != nil {
		c.Class, c.Count, c.MIGProfile = deref(g.Class), deref(g.Count), deref(g.MigProfile)
	}
	if params != nil {
		c.Params = *params
	}
	return c
}

func notFound(kind, name string) error { return &fault.NotFound{Kind: kind, Name: name} }

func remarshal(from, to any) error {
	b, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, to)
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

func ptr[T any](v T) *T { return &v }

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// catalogImageOut is a catalog entry on the wire: the document's fields, and
// each key file with its fingerprint.
func catalogImageOut(e *imagecat.Entry) (model.CatalogImage, error) {
	type key struct {
		File        string `json:"file"`
		Fingerprint string `json:"fingerprint"`
	}
	sp := e.Image.Spec
	wire := map[string]any{
		"name": e.Image.Metadata.Name, "title": e.Image.Metadata.Title, "description": e.Image.Metadata.Description,
		"repository": sp.Repository, "tags": sp.Tags, "annotations": sp.Annotations, "attestations": sp.Attestations,
		"confidential": sp.Confidential, "cuda": sp.CUDA, "framework": sp.Framework, "layer": sp.Layer, "base": sp.Base,
		"gpuClasses": sp.GPUClasses,
	}
	signing := map[string]any{}
	if sp.Signing.Keyless != nil {
		signing["keyless"] = sp.Signing.Keyless
	}
	var keys []key
	for i, f := range sp.Signing.Keys {
		if i < len(e.Keys) {
			keys = append(keys, key{File: f, Fingerprint: imageverify.Fingerprint(e.Keys[i])})
		}
	}
	if keys != nil {
		signing["keys"] = keys
	}
	wire["signing"] = signing
	for k, v := range wire {
		if v == "" || v == nil {
			delete(wire, k)
		}
	}
	b, err := json.Marshal(wire)
	if err != nil {
		return model.CatalogImage{}, err
	}
	var out model.CatalogImage
	if err := json.Unmarshal(b, &out); err != nil {
		return model.CatalogImage{}, fmt.Errorf("image %s: %w", e.Image.Metadata.Name, err)
	}
	return out, nil
}

func priceOut(p gpu.Price) model.Price {
	out := model.Price{OnDemand: p.OnDemand, Currency: model.PriceCurrencyUSD, Unit: model.GpuHour}
	if p.Spot > 0 {
		out.Spot = ptr(p.Spot)
	}
	return out
}

// Moments a person gives are read in UTC and kept within the years every
// timestamp Gantry writes can hold (RFC 3339 has four digits; a window
// ending past 9999 cannot be answered).
var (
	earliest = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	latest   = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
)

// momentParam returns *t in UTC, or def when t is nil; a moment outside
// earliest … latest is recorded in errs under field.
func momentParam(errs *fault.List, field string, t *time.Time, def time.Time) time.Time {
	if t == nil {
		return def
	}
	u := t.UTC()
	if u.Before(earliest) || !u.Before(latest) {
		errs.Addf(field, "%s is outside %s … %s", t.Format(time.RFC3339), earliest.Format(time.RFC3339), latest.Format(time.RFC3339))
		return def
	}
	return u
}
