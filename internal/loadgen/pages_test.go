package loadgen_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"slices"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/devidp"
)

// BenchmarkPortalPages is the time to first byte of the portal's main pages
// for a signed-in browser (a session cookie: looked up, and the caller's
// teams computed, on every page), on the database of 10,000 workloads, and of
// the API call the workloads page fills itself with (200 at a time). One
// browser, requests one after another: the latency a person sees.
//
//	go test -tags dev -run '^$' -bench PortalPages -benchtime 2000x ./internal/loadgen
func BenchmarkPortalPages(b *testing.B) {
	f := newFixture(b, "sqlite")
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 20 * time.Second}
	if _, _, err := devidp.SignIn(context.Background(), browser, f.g.URL+"/auth/login", "ada", "ada"); err != nil {
		b.Fatal(err)
	}
	for _, page := range []struct{ name, path string }{
		{"catalog", "/"},
		{"workloads", "/workloads"},
		{"workload", "/workloads/" + f.ids[0]},
		{"launch", "/launch/pytorch-train"},
		{"api-workloads-200", "/api/v1/workloads?limit=200"},
	} {
		b.Run(page.name, func(b *testing.B) {
			took := make([]time.Duration, 0, b.N)
			for range b.N {
				start := time.Now()
				resp, err := browser.Get(f.g.URL + page.path)
				if err != nil || resp.StatusCode != 200 {
					b.Fatalf("%s: %v %v", page.path, err, resp)
				}
				took = append(took, time.Since(start)) // the headers are in: first byte
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
