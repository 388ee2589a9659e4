package api_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// TestGPUClassesReload: a price edited in the class file is in force
// without a restart and joins the class's price history; a file that drops a
// class in force, or does not parse, leaves the classes as they were.
func TestGPUClassesReload(t *testing.T) {
	data, err := os.ReadFile("../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "gpu-classes.yaml")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	g := servertest.WithOverrides(t, server.Overrides{Identify: alice}, func(c *config.Config) { c.GPUClassesFile = file })
	e := envAt(t, g.URL, nil, "")
	type class struct {
		Price        model.Price
		PriceHistory []model.PricePoint
	}
	read := func() class {
		r := servertest.Must(e.api.GetGPUClassWithResponse(t.Context(), "A100-40GB"))(t)
		if r.StatusCode() != 200 {
			t.Fatalf("GET: %d", r.StatusCode())
		}
		return class{Price: r.JSON200.Price, PriceHistory: servertest.Deref(r.JSON200.PriceHistory)}
	}
	write := func(text string) {
		if err := os.WriteFile(file+".new", []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".new", file); err != nil {
			t.Fatal(err)
		}
	}
	if c := read(); c.Price.OnDemand != 2.7 || len(c.PriceHistory) != 1 {
		t.Fatalf("at start: %+v", c)
	}
	write(strings.Replace(string(data), "price: {onDemand: 2.7, spot: 1.6}", "price: {onDemand: 3.15, spot: 1.6}", 1))
	waitfor.Until(t, 20*time.Second, "the new price", func() error {
		if c := read(); c.Price.OnDemand != 3.15 || len(c.PriceHistory) != 2 || c.PriceHistory[1].Price.OnDemand != 3.15 || c.PriceHistory[0].Price.OnDemand != 2.7 {
			return fmt.Errorf("%+v", c)
		}
		return nil
	})
	// Refused reloads: L4 dropped (at a new price, which must not take
	// either), then a file that does not parse.
	withoutL4 := strings.Replace(string(data[:strings.Index(string(data), "  - name: L4")]), "onDemand: 2.7,", "onDemand: 9.9,", 1)
	for _, text := range []string{withoutL4, "classes: [\n"} {
		write(text)
		// The loop looks every 3 s: over two looks, nothing changes.
		if err := waitfor.Poll(7*time.Second, func() error {
			c := read()
			s := servertest.Must(e.api.GetGPUClassWithResponse(t.Context(), "L4"))(t).StatusCode()
			if c.Price.OnDemand != 3.15 || len(c.PriceHistory) != 2 || s != 200 {
				return nil // it took effect
			}
			return errors.New("as it was")
		}); err == nil {
			t.Fatalf("a refused reload took effect: %+v", read())
		}
	}
}
